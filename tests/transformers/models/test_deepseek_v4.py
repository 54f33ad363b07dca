"""DeepSeek V4 generates compiled (static compressed caches: 2 graphs per batch size, the CPU eager
tokens), and its lightning indexer records nothing for autograd, as its integer result has no gradient."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, left_pad, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.steps import cache_keyword
from hf_neuron.transformers.models.deepseek_v4 import DECODE_CAUSAL_FIX, DEEPSEEK_V4_FIX, STATIC_CACHE_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder (the compatibility table's L3 prompts).
LENGTHS = (7, 20, 41)


@pytest.fixture(scope="module")
def deepseek_v4():
    return build_model("deepseek_v4").eval()


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_compiles_two_graphs_with_cpu_eager_tokens(deepseek_v4, batch_size, fresh_dynamo):
    """A left-padded pair at batch 2: its short row's prompt ends in decode steps (prompts are never
    padded to a chunk, as the compressors pool padding too)."""
    model = deepseek_v4.to("cpu")
    lengths = LENGTHS if batch_size == 1 else (20, 7, 41, 20)
    prompts = workload_prompts(model.config.vocab_size, lengths)
    expected = generate_batches(model, prompts, batch_size, max_new_tokens=8)  # eager, a dynamic cache
    model.to("neuron")
    try:
        count, tokens = generate_counting_graphs(model, prompts, batch_size, max_new_tokens=8, **SIZES)
    finally:
        model.to("cpu")
    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def _logits_by_steps(model, ids, mask, cache, steps):
    """The last logits of ``ids`` fed in ``steps`` (lengths) through ``cache``."""
    start, logits = 0, None
    with torch.no_grad():
        for length in steps:
            end = start + length
            logits = model(input_ids=ids[:, start:end], attention_mask=mask[:, :end], use_cache=True,
                           position_ids=(mask[:, :end].cumsum(-1) - 1).clamp(min=0)[:, start:end],
                           **{cache_keyword(): cache}).logits[:, -1]
            start = end
    return logits


def test_the_static_cache_computes_the_dynamic_caches_logits(deepseek_v4):
    """Chunks then decode steps, through hf_neuron's static compressed layers and upstream's dynamic ones;
    upstream has no static layer for the two compressed layer types."""
    from transformers import DynamicCache, StaticCache

    model = deepseek_v4.to("cpu")
    ids, mask = left_pad(workload_prompts(model.config.vocab_size, (41, 30)), model.generation_config.pad_token_id)
    steps = (16, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1)  # windows of 4 and 8 complete in chunks and in decode steps
    static = _logits_by_steps(model, ids, mask, StaticCache(config=model.config, max_cache_len=64), steps)
    dynamic = _logits_by_steps(model, ids, mask, DynamicCache(config=model.config), steps)
    assert torch.allclose(static, dynamic, atol=1e-5, rtol=1e-5)
    with upstream_behaviour(STATIC_CACHE_FIX), pytest.raises(KeyError, match="compressed_attention"):
        StaticCache(config=model.config, max_cache_len=64)


def test_a_padded_row_sees_the_same_entries_in_decode_steps_as_in_a_prefill(deepseek_v4):
    """Upstream's HCA decode step shows a left-padded row's query compressed entries of padding windows
    that its prefill hides: the same prompt ending in decode steps gives other logits."""
    from transformers import DynamicCache

    model = deepseek_v4.to("cpu")
    ids, mask = left_pad(workload_prompts(model.config.vocab_size, (20, 7)), model.generation_config.pad_token_id)

    def prefilled_whole_and_in_steps():
        return (_logits_by_steps(model, ids, mask, DynamicCache(config=model.config), (20,)),
                _logits_by_steps(model, ids, mask, DynamicCache(config=model.config), (16, 1, 1, 1, 1)))

    whole, steps = prefilled_whole_and_in_steps()
    assert torch.allclose(whole, steps, atol=1e-5, rtol=1e-5)
    with upstream_behaviour(DECODE_CAUSAL_FIX):
        whole, steps = prefilled_whole_and_in_steps()
    assert torch.allclose(whole[0], steps[0], atol=1e-5, rtol=1e-5)  # the unpadded row
    assert not torch.allclose(whole[1], steps[1], atol=1e-3)  # the padded row


def test_deepseek_v4s_indexer_records_nothing_for_autograd():
    """Its result is integer indices: recorded ops would only give a compiled training step zero gradients
    for the indexer's parameters where eager gives none (the compatibility table's L4 compares the two)."""
    model = build_model("deepseek_v4").train()
    indexers = [m for m in model.modules() if type(m).__name__ == "DeepseekV4Indexer"]
    recorded = []
    for indexer in indexers:
        indexer.kv_proj.register_forward_hook(lambda module, inputs, output: recorded.append(output.requires_grad))
    ids = workload_prompts(model.config.vocab_size, (12,))[0][None]
    model(input_ids=ids, labels=ids).loss.backward()
    assert indexers and recorded and not any(recorded)
    recorded.clear()
    with upstream_behaviour(DEEPSEEK_V4_FIX):
        model(input_ids=ids, labels=ids)
    assert recorded and all(recorded)
