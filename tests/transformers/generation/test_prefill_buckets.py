"""Every prompt that fits the cache compiles within the same graphs: one per prefill bucket, plus decode.

The whole range of prompt lengths, 1 to ``max_cache_len - max_new_tokens``, in one process per model
kind, at batch size 1 and 2: dense (Llama), sliding window (Mistral, window 16) and hybrid linear
attention (Qwen3-Next). Near the end of the cache a prompt cannot be padded to whole chunks: the last
chunk overlaps the one before it (a cache that can be rewound) or the last tokens run through the
decode graph. Tokens equal CPU eager generation.
"""

import pytest
import torch

from hf_neuron.simulator import graph_log
from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.generation.chunked_prefill import RECURRENT_MASK_FIX

CACHE, CHUNK, NEW = 48, 16, 3
LENGTHS = range(1, CACHE - NEW + 1)
MODELS = {"dense": ("llama", {}), "sliding": ("mistral", {"sliding_window": 16}), "hybrid": ("qwen3_next", {})}


def _model(kind):
    name, overrides = MODELS[kind]
    return build_model(name, **overrides).eval()


def _batches(vocab_size, batch_size):
    """Prompts of every length; at batch size 2 each longest prompt is paired with one of half its length."""
    longest = workload_prompts(vocab_size, LENGTHS)
    if batch_size == 1:
        return [[p] for p in longest]
    shorter = workload_prompts(vocab_size, [max(1, n // 2) for n in LENGTHS], seed=2)
    return [[a, b] for a, b in zip(longest, shorter)]


def _generate_all(model, batches, **kwargs):
    tokens = []
    for prompts in batches:
        tokens += generate_batches(model, prompts, len(prompts), max_new_tokens=NEW, **kwargs)
    return tokens


@pytest.mark.parametrize("kind", list(MODELS))
def test_every_prompt_length_two_graphs_per_batch_size(kind, fresh_dynamo):
    model = _model(kind)
    vocab = model.config.vocab_size
    expected = {b: _generate_all(model, _batches(vocab, b)) for b in (1, 2)}  # CPU eager, dynamic cache
    model.to("neuron")
    for batch_size in (1, 2):
        with graph_log.count_graphs() as graphs:
            tokens = _generate_all(model, _batches(vocab, batch_size), max_cache_len=CACHE, prefill_chunk_size=CHUNK)
        shapes = sorted(graph_log.input_shape(r) for r in graphs.records)
        assert shapes == [(batch_size, 1), (batch_size, CHUNK)], (kind, batch_size, shapes)
        wrong = [len(p[0]) for p, got, want in zip(_batches(vocab, batch_size), tokens, expected[batch_size])
                 if not torch.equal(got, want)]
        assert not wrong, f"{kind}, batch {batch_size}: tokens differ from CPU for prompt lengths {wrong}"


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_prefill_buckets_one_graph_each(kind, fresh_dynamo):
    """Buckets 4 and 16: graphs per batch size = buckets + 1, for every prompt length."""
    model = _model(kind)
    batches = _batches(model.config.vocab_size, 1)
    expected = _generate_all(model, batches)
    model.to("neuron")
    with graph_log.count_graphs() as graphs:
        tokens = _generate_all(model, batches, max_cache_len=CACHE, prefill_chunk_size=[16, 4])
    assert sorted(graph_log.input_shape(r) for r in graphs.records) == [(1, 1), (1, 4), (1, 16)]
    assert all(torch.equal(got, want) for got, want in zip(tokens, expected))


def test_hybrid_prompts_with_and_without_padding_share_the_prefill_graph(fresh_dynamo):
    """Upstream skips the linear-attention mask of an unpadded prompt (16 tokens) but not of a padded
    one (10 tokens): two prefill graphs without the fix."""
    model = _model("hybrid")
    batches = [[p] for p in workload_prompts(model.config.vocab_size, (10, 16))]
    expected = _generate_all(model, batches)
    model.to("neuron")
    counts = {}
    for label, switch in (("upstream", upstream_behaviour(RECURRENT_MASK_FIX)), ("fixed", None)):
        torch._dynamo.reset()
        with switch or torch.no_grad(), graph_log.count_graphs() as graphs:
            tokens = _generate_all(model, batches, max_cache_len=CACHE, prefill_chunk_size=CHUNK)
        counts[label] = graphs.count
        assert all(torch.equal(got, want) for got, want in zip(tokens, expected))
    assert counts == {"upstream": 3, "fixed": 2}


def test_default_buckets_are_capped_to_the_cache(fresh_dynamo):
    """With neither max_cache_len nor prefill_chunk_size, generate prefills in the default buckets, 64
    and 512 (capped to half the cache, which leaves room to generate): 3 graphs for short and long prompts."""
    from hf_neuron.transformers import resolve_prefill_buckets

    assert resolve_prefill_buckets(None, 128) == (64,)
    assert resolve_prefill_buckets(None, 64) == (32,)
    assert resolve_prefill_buckets(None, None) == (64, 512)
    model = _model("dense")
    prompts = workload_prompts(model.config.vocab_size, (5, 70, 600))
    expected = [generate_batches(model, [p], 1, max_new_tokens=NEW)[0] for p in prompts]
    model.to("neuron")
    with graph_log.count_graphs() as graphs:
        tokens = [generate_batches(model, [p], 1, max_new_tokens=NEW)[0] for p in prompts]
    assert sorted(graph_log.input_shape(r) for r in graphs.records) == [(1, 1), (1, 64), (1, 512)]
    assert all(torch.equal(got, want) for got, want in zip(tokens, expected))


@pytest.mark.parametrize("value, message", [
    ([0, 16], "positive"), ([16, 16], "repeats"), ([16, 64], "longer than max_cache_len=48"),
])
def test_bad_buckets_raise_before_anything_compiles_or_is_allocated(value, message, fresh_dynamo):
    from hf_neuron.simulator.distributed import neuron_allocations

    model = _model("dense").to("neuron")
    prompts = workload_prompts(model.config.vocab_size, (10,))
    before = neuron_allocations()
    with graph_log.count_graphs() as graphs, pytest.raises(ValueError, match=message):
        generate_batches(model, prompts, 1, max_new_tokens=NEW, max_cache_len=CACHE, prefill_chunk_size=value)
    assert graphs.count == 0
    assert neuron_allocations() == before + 2  # the prompt and its attention mask, moved by the caller
