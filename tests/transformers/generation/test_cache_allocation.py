"""Linear-attention and latent-attention caches are allocated before generation's first compiled
forward, so generate compiles 2 graphs (one prefill chunk, one decode step) with the CPU tokens."""

from __future__ import annotations

import logging
import types

import pytest
import torch
from transformers import StaticCache

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import cache_allocation
from hf_neuron.transformers.generation.cache_allocation import FIX_NAME, SHAPES_FIX_NAME

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One and two 16-token chunks (remainders 7 and 4): the first chunk, a later one, decode.
LENGTHS = (7, 20)


def _graphs_and_tokens(model, prompts):
    return generate_counting_graphs(model, prompts, 1, max_new_tokens=3, **SIZES)


@pytest.mark.parametrize("model_type", [
    "qwen3_5",  # gated delta net layers (convolution and recurrent state) between full attention layers
    "minicpm3",  # latent attention: keys and values of different sizes
])
def test_generate_compiles_two_graphs_with_the_cpu_tokens(model_type, fresh_dynamo, monkeypatch):
    model = build_model(model_type).eval()
    prompts = workload_prompts(model.config.get_text_config().vocab_size, LENGTHS)
    expected = generate_batches(model, prompts, 1, max_new_tokens=3)  # CPU, eager, dynamic cache
    model.to("neuron")
    measure, measured = cache_allocation.measure_first_forward_states, []
    monkeypatch.setattr(cache_allocation, "measure_first_forward_states",
                        lambda *args, **kwargs: measured.append(args[2:]) or measure(*args, **kwargs))

    # The early-init shapes check measures with the same fake forward once it is active (after
    # MiMo-V2-Flash's module is imported in this process, by an earlier test or not); these models'
    # configured shapes are right, so it is left out and only this fix's measurements are counted.
    with upstream_behaviour(SHAPES_FIX_NAME):
        with upstream_behaviour(FIX_NAME):
            without, _ = _graphs_and_tokens(model, prompts)
        count, tokens = _graphs_and_tokens(model, prompts)

    assert without > 2
    assert count == 2
    assert measured == [(1, SIZES["prefill_chunk_size"])]  # once for both prompts: one cache layout
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_measuring_leaves_the_cache_untouched():
    """The fake forward writes into a copy: the real cache's lengths and states stay as they were."""
    model = build_model("qwen3_5").eval()
    cache = StaticCache(config=model.config.get_text_config(decoder=True), max_cache_len=32)
    attention = next(i for i, layer in enumerate(cache.layers) if hasattr(layer, "keys"))
    cache.layers[attention].lazy_initialization(torch.zeros(2, 2, 0, 16), torch.zeros(2, 2, 0, 16))
    pending = cache_allocation.unallocated_layers(cache)

    measured = cache_allocation.measure_first_forward_states(model, cache, batch_size=2, seq_len=16)

    assert int(cache.layers[attention].cumulative_length) == 0
    assert not cache.layers[attention].keys.any()
    assert cache_allocation.unallocated_layers(cache) == pending
    assert sorted(measured) == pending
    conv_shape, _ = measured[pending[0]]["conv"][0]
    assert conv_shape[0] == 2

    cache_allocation.allocate_measured_states(cache, measured, torch.device("cpu"))
    assert cache_allocation.unallocated_layers(cache) == []
    assert cache.layers[pending[0]].has_previous_state[0] is True


class _TableOnFirstForward(torch.nn.Module):
    """Stores tensors on itself during a forward, as a lazily built rotary table does."""

    device = torch.device("cpu")

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.scale = torch.ones(2)

    def forward(self, input_ids, **kwargs):
        self.table = torch.ones(input_ids.shape[1])
        self.scale = self.scale * 2
        self.steps = self.steps + 1


def test_measuring_leaves_no_fake_tensor_on_the_model():
    model = _TableOnFirstForward()
    scale = model.scale
    cache_allocation.measure_first_forward_states(model, types.SimpleNamespace(layers=[]), batch_size=1, seq_len=4)
    assert not hasattr(model, "table")
    assert model.scale is scale and int(model.steps) == 0


def test_a_model_the_fake_forward_cannot_run_keeps_lazy_allocation(monkeypatch, caplog, fresh_dynamo):
    """It still generates the CPU tokens (more graphs), and says so once."""
    model = build_model("lfm2").eval()
    prompts = workload_prompts(model.config.vocab_size, (7, 20))
    expected = generate_batches(model, prompts, 1, max_new_tokens=3)
    model.to("neuron")

    def cannot(*args, **kwargs):
        raise RuntimeError("no fake kernel for this op")

    monkeypatch.setattr(cache_allocation, "measure_first_forward_states", cannot)
    monkeypatch.setattr(cache_allocation, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=cache_allocation.__name__):
        _, tokens = _graphs_and_tokens(model, prompts)

    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)
    warnings = [r.getMessage() for r in caplog.records if "could not measure" in r.getMessage()]
    assert len(warnings) == 1 and "Lfm2ForCausalLM" in warnings[0] and FIX_NAME in warnings[0]


def test_detection_sees_the_gap_on_the_installed_release():
    from hf_neuron.transformers import import_fix_targets

    import_fix_targets()
    assert get_fix(FIX_NAME).active, get_fix(FIX_NAME).reason
    assert cache_allocation._generate_leaves_layers_unallocated() is True


# ------------------------------------------------------------ early-initialised shapes, measured


def test_early_init_with_the_config_shapes_fails_and_measured_shapes_give_the_cpu_tokens(fresh_dynamo):
    """MiMo-V2-Flash's sliding layers write twice the configured key/value heads: generate's cache,
    allocated ahead from the config, rejects the first compiled chunk; measured, it gives the CPU tokens
    in 2 graphs."""
    model = build_model("mimo_v2_flash").eval()
    prompts = workload_prompts(model.config.vocab_size, LENGTHS)
    expected = generate_batches(model, prompts, 1, max_new_tokens=3)
    model.to("neuron")

    with upstream_behaviour(cache_allocation.SHAPES_FIX_NAME), pytest.raises(Exception, match="Sizes of tensors must match"):
        _graphs_and_tokens(model, prompts[:1])
    torch._dynamo.reset()
    count, tokens = _graphs_and_tokens(model, prompts)

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_a_cache_allocated_with_the_written_shapes_is_left_as_it_is():
    model = build_model("llama").eval()
    cache = model._prepare_static_cache("static", 1, 32, 16, {})
    assert any(cache_allocation._kv_layout(layer) for layer in cache.layers)
    assert cache_allocation.misallocated_layers(model, cache, batch_size=1, seq_len=16) == {}


def test_shapes_detection_sees_the_gap_on_the_installed_release():
    from hf_neuron.transformers import import_fix_targets

    import_fix_targets()
    assert get_fix(cache_allocation.SHAPES_FIX_NAME).active, get_fix(cache_allocation.SHAPES_FIX_NAME).reason


@pytest.mark.distributed
def test_sharded_mimo_is_measured_too_and_tp2_equals_one_device(tp2_only_with_the_fix):
    """Each rank measures its shard's shapes on fake tensors (collectives there neither communicate nor
    wait): MiMo-V2-Flash's sliding layers write two key/value heads per rank where the config says one."""
    tp2_only_with_the_fix("mimo_v2_flash", SHAPES_FIX_NAME, "Sizes of tensors must match")
