"""MiniMax, whose lightning attention keeps a fixed-size state, generates compiled: 2 graphs per batch
size, with the tokens of upstream's eager generation on CPU (its own ``MiniMaxCache``)."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.capture import chunked_prefill_cache
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.generation.steps import cache_keyword
from hf_neuron.transformers.models.minimax import MINIMAX_CACHE_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder; left-padded pairs at batch 2.
LENGTHS = {1: (7, 20, 41), 2: (20, 7, 41, 20)}
# MiniMax-Text-01's layout starts with lightning layers: the cache's length is then read from one.
LAYER_TYPES = ["linear_attention", "full_attention"]


@pytest.fixture(scope="module")
def minimax():
    return build_model("minimax", layer_types=LAYER_TYPES).eval()


def _on_neuron_counting_graphs(model, prompts, batch_size, **kwargs):
    model.to("neuron")
    try:
        count, tokens = generate_counting_graphs(model, prompts, batch_size, max_new_tokens=8, **kwargs)
    finally:
        model.to("cpu")
    return count, [t.cpu() for t in tokens]


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_compiles_two_graphs_with_upstreams_tokens(minimax, batch_size, fresh_dynamo):
    prompts = workload_prompts(minimax.config.vocab_size, LENGTHS[batch_size])
    with upstream_behaviour(MINIMAX_CACHE_FIX):
        expected = generate_batches(minimax, prompts, batch_size, max_new_tokens=8)

    minimax.to("neuron")
    assert generation_compiles(minimax) == (True, None)
    count, tokens = _on_neuron_counting_graphs(minimax, prompts, batch_size, **SIZES)

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)

    # Upstream: no transformers cache, so nothing to compile with; generate runs eagerly (called
    # plainly: a chunked prefill needs a cache).
    with upstream_behaviour(MINIMAX_CACHE_FIX):
        minimax.to("neuron")
        compiles, why = generation_compiles(minimax)
        count, tokens = _on_neuron_counting_graphs(minimax, prompts, batch_size)
    assert not compiles and "keeps its own generation state" in why
    assert count == 0
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_a_transformers_cache_holds_the_lightning_state_and_counts_its_tokens(minimax):
    """Eager on CPU: a prompt prefilled in two chunks through a transformers cache gives the logits
    of upstream's one pass, the state sits in the lightning layer and the cache's length (read from
    that first layer) is the tokens seen."""
    ids = workload_prompts(minimax.config.vocab_size, (24,))[0][None]
    positions = torch.arange(24)[None]
    with torch.no_grad():
        with upstream_behaviour(MINIMAX_CACHE_FIX):
            whole = minimax(input_ids=ids, use_cache=True).logits[:, -1]
        cache = DynamicCache(config=minimax.config)
        for part in (slice(0, 10), slice(10, 24)):
            chunked = minimax(input_ids=ids[:, part], position_ids=positions[:, part], use_cache=True,
                              **{cache_keyword(): cache}).logits[:, -1]

    assert torch.allclose(chunked, whole, atol=1e-5, rtol=1e-4)
    assert cache.layers[0].recurrent_states[0] is not None
    assert int(cache.get_seq_length()) == 24
    with upstream_behaviour(MINIMAX_CACHE_FIX), pytest.raises(ValueError, match="MiniMax uses cache of its own"):
        minimax(input_ids=ids, use_cache=True, **{cache_keyword(): DynamicCache(config=minimax.config)})


def test_states_allocated_ahead_keep_their_token_count_on_the_device(minimax):
    """A lightning layer has a recurrent state only: its token count goes to the device with it, not
    left on the CPU inside every compiled step."""
    minimax.to("neuron")
    try:
        cache = chunked_prefill_cache(minimax, 1, 32, 16, minimax.device)
    finally:
        minimax.to("cpu")
    layer = cache.layers[0]

    assert layer.recurrent_states[0].device.type == "neuron" and layer.has_previous_state[0]
    count = getattr(layer, "cumulative_length_linear", None)  # Transformers 5.25 and later
    assert count is None or count.device.type == "neuron"


def test_the_fix_is_applied():
    assert get_fix(MINIMAX_CACHE_FIX).status == "applied"
