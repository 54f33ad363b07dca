"""RWKV, whose state is no transformers cache, generates compiled on Neuron: 2 graphs per batch size,
with the tokens of its eager generation on CPU."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.capture import chunked_prefill_cache
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.generation.steps import cache_keyword
from hf_neuron.transformers.models import rwkv
from hf_neuron.transformers.models.rwkv import ONE_TOKEN_FIX, STATE_CACHE_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder; left-padded pairs at batch 2.
LENGTHS = {1: (7, 20, 41), 2: (20, 7, 41, 20)}


@pytest.fixture(scope="module")
def model():
    return build_model("rwkv").eval()


def _on_neuron_counting_graphs(model, prompts, batch_size, **sizes):
    model.to("neuron")
    try:
        count, tokens = generate_counting_graphs(model, prompts, batch_size, max_new_tokens=8, **sizes)
    finally:
        model.to("cpu")
    return count, [t.cpu() for t in tokens]


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_compiles_two_graphs_with_the_cpu_tokens(model, batch_size, fresh_dynamo):
    prompts = workload_prompts(model.config.vocab_size, LENGTHS[batch_size])
    expected = generate_batches(model, prompts, batch_size, max_new_tokens=8)

    model.to("neuron")
    assert generation_compiles(model) == (True, None)
    with upstream_behaviour(STATE_CACHE_FIX):
        compiles, why = generation_compiles(model)
    model.to("cpu")
    assert not compiles and "own generation state" in why
    # Upstream has no cache to size (a chunked prefill refuses to run without one): generate is called plainly.
    with upstream_behaviour(STATE_CACHE_FIX):
        upstream_count, upstream_tokens = _on_neuron_counting_graphs(model, prompts, batch_size)
    count, tokens = _on_neuron_counting_graphs(model, prompts, batch_size, **SIZES)

    assert upstream_count == 0  # every step eager
    assert count == 2
    for got, eager, want in zip(tokens, upstream_tokens, expected):
        assert torch.equal(got, want)
        assert torch.equal(eager, want)


def test_one_token_steps_keep_the_rows_of_a_batch_apart(model):
    """On CPU: a row generated in a batch of two gets the tokens it gets alone; upstream's one-token
    forward mixes every row with the others' token shift (batch 1 is not affected)."""
    prompt = workload_prompts(model.config.vocab_size, (20,))[0]
    # Prompts of one length: left padding (which RWKV computes as tokens) plays no part.
    same_length = [prompt, prompt.flip(0)]
    alone = [generate_batches(model, [p], 1, max_new_tokens=8)[0][0] for p in same_length]
    together = generate_batches(model, same_length, 2, max_new_tokens=8)[0]
    with upstream_behaviour(ONE_TOKEN_FIX):
        upstream_together = generate_batches(model, same_length, 2, max_new_tokens=8)[0]

    # A row that stops at the end-of-sequence token alone is padded after it in the batch.
    assert all(torch.equal(row[:len(want)], want) for row, want in zip(together, alone))
    assert not all(torch.equal(row[:len(want)], want) for row, want in zip(upstream_together, alone))


def test_the_cache_holds_the_state_the_forward_would_start_from(model):
    """The state cache starts from what RWKV's forward allocates when given no state."""
    ids = workload_prompts(model.config.vocab_size, (5,))[0][None]
    cache = rwkv.state_cache(model, 1)
    with torch.no_grad():
        fresh = model(input_ids=ids, use_cache=True)
        cached = model(input_ids=ids, use_cache=True, **{cache_keyword(): cache})

    assert torch.equal(cached.logits, fresh.logits)
    assert cache.get_seq_length() == 5
    for got, want in zip(cache.state, fresh.state):
        assert torch.equal(got, want)
    cache.reset()
    assert cache.get_seq_length() == 0 and torch.all(cache.state[-1] == -1e30)


def test_the_traced_steps_use_the_state_cache(model):
    assert rwkv.is_state_cache(chunked_prefill_cache(model, 2, 64, 16, torch.device("cpu")))


def test_the_fixes_are_applied():
    for name in (STATE_CACHE_FIX, ONE_TOKEN_FIX):
        assert get_fix(name).status == "applied", name
