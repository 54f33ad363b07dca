"""State-space models (Mamba, Falcon-Mamba, Mamba-2) generate compiled with a static cache of recurrent
state: 2 graphs per batch size, with the tokens of an unchunked CPU generation."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import recurrent_cache
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.generation.recurrent_cache import INIT_SHAPE_FIX, PREFILL_FIX
from hf_neuron.transformers.generation.steps import cache_keyword
from hf_neuron.transformers.models.falcon_mamba import FALCON_MAMBA_SCAN_FIX
from hf_neuron.transformers.models.mamba import MAMBA_SCAN_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder.
LENGTHS = (7, 20, 41)
SCAN_FIXES = {"mamba": MAMBA_SCAN_FIX, "falcon_mamba": FALCON_MAMBA_SCAN_FIX}


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba", "mamba2"])
def test_generate_compiles_two_graphs_with_the_cpu_tokens(model_type, fresh_dynamo):
    model = build_model(model_type).eval()
    prompts = workload_prompts(model.config.vocab_size, LENGTHS)
    expected = generate_batches(model, prompts, 1, max_new_tokens=8)  # CPU, eager, one pass over the prompt
    model.to("neuron")

    assert generation_compiles(model) == (True, None)
    count, tokens = generate_counting_graphs(model, prompts, 1, max_new_tokens=8, **SIZES)

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba"])
def test_without_the_scan_fix_later_prefill_chunks_forget_the_state(model_type, fresh_dynamo):
    model = build_model(model_type).eval()
    prompts = workload_prompts(model.config.vocab_size, (20, 41))
    expected = generate_batches(model, prompts, 1, max_new_tokens=8)
    model.to("neuron")

    with upstream_behaviour(SCAN_FIXES[model_type]):
        _, tokens = generate_counting_graphs(model, prompts, 1, max_new_tokens=8, **SIZES)

    assert not all(torch.equal(got, want) for got, want in zip(tokens, expected))


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba"])
def test_a_prompt_prefilled_in_chunks_through_a_cache_equals_one_pass(model_type):
    """The scan fix on its own, eager on CPU: two chunks through a dynamic cache give one pass's logits."""
    model = build_model(model_type).eval()
    ids = workload_prompts(model.config.vocab_size, (24,))[0][None]

    def chunked():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :16], use_cache=True, **{cache_keyword(): cache})
        return model(input_ids=ids[:, 16:], use_cache=True, **{cache_keyword(): cache}).logits[:, -1]

    with torch.no_grad():
        whole = model(input_ids=ids).logits[:, -1]
        fixed = chunked()
        with upstream_behaviour(SCAN_FIXES[model_type]):
            forgetting = chunked()

    scale = whole.abs().max()
    assert (fixed - whole).abs().max() <= 1e-4 * scale
    assert (forgetting - whole).abs().max() > 1e-2 * scale


def test_static_cache_has_no_key_value_shape_to_allocate():
    model = build_model("mamba")
    assert model._get_static_cache_init_shape() is None
    with upstream_behaviour(INIT_SHAPE_FIX), pytest.raises(AttributeError, match="num_attention_heads"):
        model._get_static_cache_init_shape()
    # A model with attention layers keeps upstream's answer.
    llama = build_model("llama")
    assert llama._get_static_cache_init_shape() == (llama.config.num_key_value_heads, llama.config.head_dim)


def _length_or_refusal(cache):
    """The length ``cache`` reports, or the ``ValueError`` it refuses with (as text, to compare)."""
    try:
        return int(cache.get_seq_length())
    except ValueError as exc:
        return f"ValueError: {exc}"


def _prefilled_cache(model, tokens: int):
    """A dynamic cache of ``model`` after an eager forward over ``tokens`` tokens."""
    cache = DynamicCache(config=model.config)
    ids = workload_prompts(model.config.vocab_size, (tokens,))[0][None].to(model.device)
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{cache_keyword(): cache})
    return cache


def test_without_the_prefill_fix_chunked_prefill_refuses_the_cache_or_compiles_per_chunk(fresh_dynamo):
    model = build_model("mamba2").eval().to("neuron")
    prompts = workload_prompts(model.config.vocab_size, LENGTHS)
    with upstream_behaviour(PREFILL_FIX):
        refuses = isinstance(_length_or_refusal(_prefilled_cache(model, 5)), str)
        if refuses:  # Transformers before 5.25: a cache of recurrent layers only has no length to give
            with pytest.raises(ValueError, match="only contain LinearAttention layers"):
                generate_batches(model, prompts[1:2], 1, max_new_tokens=2, **SIZES)
        else:  # each chunk's mask is as wide as the prompt up to it: one graph per width
            without, _ = generate_counting_graphs(model, prompts, 1, max_new_tokens=2, **SIZES)
    count, _ = generate_counting_graphs(model, prompts, 1, max_new_tokens=2, **SIZES)

    assert refuses or without > 2
    assert count == 2


def test_recurrent_prefill_flag_is_off_outside_generate(fresh_dynamo):
    model = build_model("mamba2").eval().to("neuron")
    generate_batches(model, workload_prompts(model.config.vocab_size, (20,)), 1, max_new_tokens=2, **SIZES)
    assert recurrent_cache.recurrent_prefill_active() is False
    # Outside a prefill a recurrent-only cache answers for its length as upstream does: a ValueError
    # before Transformers 5.25, the tokens its layers have seen from 5.25.
    cache = _prefilled_cache(model, 5)
    with upstream_behaviour(PREFILL_FIX):
        upstream = _length_or_refusal(cache)
    assert _length_or_refusal(cache) == upstream
    assert upstream == 5 or upstream.startswith("ValueError")


def test_the_fixes_are_applied():
    build_model("mamba"), build_model("falcon_mamba")  # imports the modeling modules the scan fixes wait for
    for name in (INIT_SHAPE_FIX, PREFILL_FIX, MAMBA_SCAN_FIX, FALCON_MAMBA_SCAN_FIX):
        assert get_fix(name).active, name
