"""The generation workload compiles exactly 2 graphs on Neuron, with the tokens of CPU eager generation.

8 greedy prompts of 20-140 tokens, max_cache_len 256, prefill chunk 32, 16 new tokens; dense (Llama)
and sliding-window (Mistral, window 64) models, batch size 1 and 4 (left padded to the longest
prompt only: generate pads to the chunk multiple itself). Graphs are counted by the simulator's
graph log, with the "neuron" backend that the generation defaults choose.
"""

import pytest
import torch

from hf_neuron.simulator import graph_log
from hf_neuron.testing.generation_workload import generate_batches, tiny_workload_model, workload_prompts
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.generation.chunked_prefill import MASK_FIX, PAD_FIX, STRIDES_FIX
from hf_neuron.transformers.generation.sliding_window_cache import FIX_NAME as SLIDING_FIX

RECIPE = {"max_cache_len": 256, "prefill_chunk_size": 32}


def _count_graphs(model, prompts, batch_size, **kwargs):
    torch._dynamo.reset()
    with graph_log.count_graphs() as graphs:
        tokens = generate_batches(model, prompts, batch_size, **kwargs)
    assert all(r["status"] == "compiled" for r in graphs.records), graphs.records
    return graphs.count, tokens


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("kind", ["dense", "sliding"])
def test_workload_compiles_two_graphs_with_cpu_tokens(kind, batch_size, fresh_dynamo):
    model = tiny_workload_model(kind)
    prompts = workload_prompts(model.config.vocab_size)
    expected = generate_batches(model, prompts, batch_size)  # CPU, eager, dynamic cache

    model.to("neuron")
    count, tokens = _count_graphs(model, prompts, batch_size, **RECIPE)

    assert count == 2
    assert [t.shape for t in tokens] == [e.shape for e in expected]
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


# Each fix alone: a small workload that compiles more than 2 graphs without it, exactly 2 with it.
CASES = {
    # prompts padded to 32 and 64 tokens: chunk position_ids are views with strides 32 and 64
    STRIDES_FIX: ("dense", (20, 40), 32, 3),
    # one 64-token prompt: SDPA skips the mask of the first chunk only
    MASK_FIX: ("dense", (64,), None, 3),
    # 40 tokens unpadded: chunks of 32 and 8 tokens
    PAD_FIX: ("dense", (40,), None, 3),
    # upstream guards on the Python int cache length: one graph per decode step
    SLIDING_FIX: ("sliding", (32,), None, 3),
}


@pytest.mark.parametrize("fix_name", list(CASES))
def test_each_fix_is_needed_for_two_graphs(fix_name, fresh_dynamo):
    kind, lengths, pad_multiple, new_tokens = CASES[fix_name]
    model = tiny_workload_model(kind)
    prompts = workload_prompts(model.config.vocab_size, lengths)
    expected = generate_batches(model, prompts, 1, pad_multiple=pad_multiple, max_new_tokens=new_tokens)
    model.to("neuron")
    kwargs = dict(RECIPE, pad_multiple=pad_multiple, max_new_tokens=new_tokens)

    with upstream_behaviour(fix_name):
        without, _ = _count_graphs(model, prompts, 1, **kwargs)
    with_fix, tokens = _count_graphs(model, prompts, 1, **kwargs)

    assert without > 2
    assert with_fix == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def _assert_two_graphs_with_cpu_tokens(model, lengths, max_new_tokens, **sizes):
    """Batch-1 greedy generation of prompts of ``lengths`` on Neuron: 2 graphs, the CPU eager tokens."""
    prompts = workload_prompts(model.config.get_text_config().vocab_size, lengths)
    expected = generate_batches(model, prompts, 1, max_new_tokens=max_new_tokens)
    model.to("neuron")
    count, tokens = _count_graphs(model, prompts, 1, max_new_tokens=max_new_tokens, **sizes)
    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_hybrid_sliding_and_full_attention_moe_compiles_two_graphs(fresh_dynamo):
    """GPT-OSS: alternating sliding / full attention layers and mixture-of-experts MLPs."""
    from hf_neuron.tiny_models import build_model

    model = build_model("gpt_oss", sliding_window=32)
    _assert_two_graphs_with_cpu_tokens(model, (20, 45, 70), 8, max_cache_len=128, prefill_chunk_size=16)


def test_multimodal_class_with_a_text_prompt_compiles_two_graphs(fresh_dynamo):
    """Mistral 3 through its image-text class: a text-only prompt is padded to the chunk like any other
    (the class passes an empty ``mm_encoder_outputs``, which is not an image)."""
    from hf_neuron.tiny_models import build_model

    model = build_model("mistral3").eval()
    _assert_two_graphs_with_cpu_tokens(model, (7, 20), 4, max_cache_len=64, prefill_chunk_size=16)


def test_per_layer_type_masks_get_dense_strides():
    """Hybrid models take their masks as a dict per layer type; chunk views in it are made dense too."""
    from hf_neuron.transformers.generation import chunked_prefill

    whole = torch.ones(1, 64)
    chunk = whole[:, 16:32]  # a prefill chunk's view: stride 64, not 16
    inputs = chunked_prefill._prepare_inputs_with_dense_strides(
        lambda self: {"input_ids": chunk, "attention_mask": {"linear_attention": chunk, "full_attention": None}}, None)
    assert inputs["input_ids"].stride() == (16, 1)
    assert inputs["attention_mask"]["linear_attention"].stride() == (16, 1)
    assert torch.equal(inputs["attention_mask"]["linear_attention"], chunk)
    assert inputs["attention_mask"]["full_attention"] is None


# Each detector, run before and after its fix: it sees the gap on the installed release (so the fix
# is active), and no longer sees it once the fix is in place.
def _probes():
    from hf_neuron.transformers.generation import sliding_window_cache as cache
    from hf_neuron.transformers.generation import chunked_prefill

    return {
        STRIDES_FIX: chunked_prefill._chunk_inputs_keep_parent_strides,
        PAD_FIX: chunked_prefill._generate_leaves_last_chunk_short,
        SLIDING_FIX: cache._upstream_tracks_python_int,
    }


@pytest.mark.parametrize("fix_name", [STRIDES_FIX, PAD_FIX, SLIDING_FIX])
def test_probe_sees_the_gap_without_the_fix_only(fix_name):
    from hf_neuron.patching import get_fix
    from hf_neuron.transformers import import_fix_targets

    import_fix_targets()
    probe = _probes()[fix_name]
    assert get_fix(fix_name).active, get_fix(fix_name).reason
    with upstream_behaviour(fix_name):
        assert probe() is True
    assert probe() is False


# Prompt lengths with remainders 20, 5, 23 and 0 modulo the 32-token chunk; more than one chunk for most.
MIXED_LENGTHS = (20, 37, 55, 64, 87)


@pytest.mark.parametrize("kind", ["dense", "sliding"])
def test_two_graphs_per_batch_size_and_cache_length_in_one_process(kind, fresh_dynamo):
    """One process, no Dynamo reset: each new (batch size, max_cache_len) adds exactly its 2 graphs,
    and running every configuration again compiles nothing. (Cache lengths ascend: a request for a
    shorter cache than the model's current one of the same batch size reuses it, upstream.)"""
    model = tiny_workload_model(kind)
    prompts = workload_prompts(model.config.vocab_size, MIXED_LENGTHS)
    configurations = [(1, 192), (2, 192), (1, 256), (2, 256)]
    expected = {batch: generate_batches(model, prompts, batch) for batch in (1, 2)}  # CPU, eager
    model.to("neuron")

    added = {}
    for batch, cache_len in configurations:
        with graph_log.count_graphs() as graphs:
            tokens = generate_batches(model, prompts, batch, max_cache_len=cache_len, prefill_chunk_size=32)
        added[(batch, cache_len)] = graphs.count
        assert all(torch.equal(got, want) for got, want in zip(tokens, expected[batch])), (batch, cache_len)
    with graph_log.count_graphs() as again:
        for batch, cache_len in configurations:
            generate_batches(model, prompts, batch, max_cache_len=cache_len, prefill_chunk_size=32)

    if kind == "dense":
        assert added == dict.fromkeys(configurations, 2)
    else:  # every layer's cache holds the 64-token window: the longer cache has the same shapes
        assert added == {(1, 192): 2, (2, 192): 2, (1, 256): 0, (2, 256): 0}
    assert again.count == 0


def _graphs_per_batch_size(model, prompts, batch_sizes):
    added = []
    for batch in batch_sizes:
        with graph_log.count_graphs() as graphs:
            tokens = generate_batches(model, prompts[:batch], batch, max_cache_len=128, prefill_chunk_size=32,
                                      max_new_tokens=4)
        added.append(graphs.count)
        expected = generate_batches(model.to("cpu"), prompts[:batch], batch, max_new_tokens=4)
        model.to("neuron")
        assert all(torch.equal(got, want) for got, want in zip(tokens, expected)), batch
    return added


def test_more_batch_sizes_than_dynamos_default_recompile_limit(fresh_dynamo):
    """Six batch sizes in one process (12 graphs, past Dynamo's default limit of 8): every one compiles.
    Upstream compiles the first four and runs the fifth and sixth eagerly; so does a user-set limit."""
    from hf_neuron.transformers.generation.recompile_limit import FIX_NAME as LIMIT_FIX

    prompts = workload_prompts(tiny_workload_model("dense").config.vocab_size, (20, 37, 55, 64, 87, 30))
    batch_sizes = (1, 2, 3, 4, 5, 6)
    assert _graphs_per_batch_size(tiny_workload_model("dense").to("neuron"), prompts, batch_sizes) == [2] * 6

    torch._dynamo.reset()
    with upstream_behaviour(LIMIT_FIX):
        upstream = _graphs_per_batch_size(tiny_workload_model("dense").to("neuron"), prompts, batch_sizes)
    assert upstream == [2, 2, 2, 2, 0, 0]

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=6):  # the user's limit wins
        assert _graphs_per_batch_size(tiny_workload_model("dense").to("neuron"), prompts, batch_sizes[:4]) == [2, 2, 2, 0]
