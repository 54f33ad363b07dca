"""RecurrentGemma, whose recurrent state lives on its modules, generates compiled: 2 graphs per batch
size, with the tokens of upstream's unchunked eager generation on CPU."""

from __future__ import annotations

import contextlib

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import cache_allocation
from hf_neuron.transformers.generation.capture import chunked_prefill_cache
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.models import recurrent_gemma as module_states
from hf_neuron.transformers.models.recurrent_gemma import CHUNK_FIX, OUTPUT_FIX, STATES_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder; left-padded pairs at batch 2.
LENGTHS = {1: (7, 20, 41), 2: (20, 7, 41, 41)}


@pytest.fixture(scope="module")
def recurrent_gemma():
    return build_model("recurrent_gemma").eval()


def _on_neuron_counting_graphs(model, prompts, batch_size, **kwargs):
    model.to("neuron")
    try:
        count, tokens = generate_counting_graphs(model, prompts, batch_size, max_new_tokens=8, **SIZES, **kwargs)
    finally:
        model.to("cpu")
    return count, [t.cpu() for t in tokens]


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_compiles_two_graphs_with_upstreams_tokens(recurrent_gemma, batch_size, fresh_dynamo):
    prompts = workload_prompts(recurrent_gemma.config.vocab_size, LENGTHS[batch_size])
    with upstream_behaviour():
        expected = generate_batches(recurrent_gemma, prompts, batch_size, max_new_tokens=8)

    recurrent_gemma.to("neuron")
    assert generation_compiles(recurrent_gemma) == (True, None)
    count, tokens = _on_neuron_counting_graphs(recurrent_gemma, prompts, batch_size)

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_without_the_chunk_fix_each_forward_replaces_the_states_and_recompiles(recurrent_gemma, fresh_dynamo):
    prompts = workload_prompts(recurrent_gemma.config.vocab_size, (20, 41))
    with upstream_behaviour(CHUNK_FIX):
        count, _ = _on_neuron_counting_graphs(recurrent_gemma, prompts, 1)

    assert count > 2


def test_the_chunk_fix_alone_gives_one_pass_logits(recurrent_gemma):
    """Eager on CPU: two prefill chunks give the logits of one pass (the window is carried over)."""
    from transformers import DynamicCache

    from hf_neuron.transformers.generation.steps import cache_keyword

    ids = workload_prompts(recurrent_gemma.config.vocab_size, (24,))[0][None]
    positions = torch.arange(24)[None]
    with torch.no_grad():
        whole = recurrent_gemma(input_ids=ids).logits[:, -1]
        for fixed in (True, False):
            module_states.allocate_module_states(recurrent_gemma, 1)
            cache = DynamicCache(config=recurrent_gemma.config)
            with contextlib.nullcontext() if fixed else upstream_behaviour(CHUNK_FIX):
                for part in (slice(0, 10), slice(10, 24)):
                    last = recurrent_gemma(input_ids=ids[:, part], position_ids=positions[:, part], use_cache=True,
                                           **{cache_keyword(): cache}).logits[:, -1]
            assert torch.allclose(last, whole, atol=1e-5, rtol=1e-4) == fixed


def test_without_the_output_fix_the_chunked_prefill_fails(recurrent_gemma, fresh_dynamo):
    from hf_neuron.transformers.generation.steps import cache_keyword

    prompts = workload_prompts(recurrent_gemma.config.vocab_size, (20,))
    with upstream_behaviour(OUTPUT_FIX), pytest.raises(AttributeError, match=f"no attribute '{cache_keyword()}'"):
        _on_neuron_counting_graphs(recurrent_gemma, prompts, 1)


def test_without_the_states_fix_the_first_chunk_is_its_own_graph(recurrent_gemma, fresh_dynamo):
    for block in (layer.temporal_block for layer in recurrent_gemma.model.layers):
        if hasattr(block, "conv1d_state"):
            block.conv1d_state = block.rg_lru.recurrent_states = None  # a model that never generated
    prompts = workload_prompts(recurrent_gemma.config.vocab_size, (41,))
    with upstream_behaviour(STATES_FIX):
        count, _ = _on_neuron_counting_graphs(recurrent_gemma, prompts, 1)

    assert count > 2


def test_a_training_step_still_has_gradients(recurrent_gemma):
    """A training forward (the config's use_cache on, grad enabled) keeps the states out of place:
    autograd saved the old ones for the backward pass."""
    ids = workload_prompts(recurrent_gemma.config.vocab_size, (12,))[0][None]
    recurrent_gemma.train()
    try:
        module_states.allocate_module_states(recurrent_gemma, 1)
        recurrent_gemma(input_ids=ids, labels=ids).loss.backward()
    finally:
        recurrent_gemma.zero_grad(set_to_none=True)
        recurrent_gemma.eval()


def test_cache_layers_the_forward_never_writes_are_not_waited_for(recurrent_gemma):
    cache = chunked_prefill_cache(recurrent_gemma, 1, 32, 16, torch.device("cpu"))

    assert [type(layer).__name__ for layer in cache.layers] == ["LinearAttentionLayer", "StaticSlidingWindowLayer"]
    assert cache_allocation.unallocated_layers(cache) == []


def test_the_fixes_are_applied():
    for name in (STATES_FIX, CHUNK_FIX, OUTPUT_FIX):
        assert get_fix(name).status == "applied", name
