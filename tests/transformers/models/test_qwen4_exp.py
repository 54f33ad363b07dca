"""Qwen4-Exp generates compiled: its sparse-attention indexer and its position history in static shapes,
2 graphs per batch size, with the tokens of upstream's eager generation on CPU."""

from __future__ import annotations

import copy

import pytest
import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.steps import cache_keyword
from hf_neuron.transformers.models import qwen4_exp as indexed_attention
from hf_neuron.transformers.models.qwen4_exp import HISTORY_FIX, INDEXER_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
# One, two and three 16-token chunks, each a different remainder.
LENGTHS = (7, 20, 41)


@pytest.fixture(scope="module")
def qwen4_exp():
    return build_model("qwen4_exp").eval()


def _upstream_tokens(model, prompts, batch_size):
    """Upstream's generation: eager on CPU, a dynamic cache, upstream's indexer."""
    with upstream_behaviour(INDEXER_FIX, HISTORY_FIX):
        return generate_batches(model, prompts, batch_size, max_new_tokens=8)


@pytest.mark.parametrize("batch_size", [1, 2])
def test_generate_compiles_two_graphs_with_upstreams_tokens(qwen4_exp, batch_size, fresh_dynamo):
    model = qwen4_exp.to("cpu")
    lengths = LENGTHS if batch_size == 1 else (20, 7, 41, 41)  # left-padded pairs
    prompts = workload_prompts(model.config.get_text_config().vocab_size, lengths)
    expected = _upstream_tokens(model, prompts, batch_size)
    model.to("neuron")
    try:
        count, tokens = generate_counting_graphs(model, prompts, batch_size, max_new_tokens=8, **SIZES)
    finally:
        model.to("cpu")

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got.cpu(), want)


def test_without_the_history_fix_each_step_compiles_again(qwen4_exp, fresh_dynamo):
    model = qwen4_exp.to("neuron")
    prompts = workload_prompts(model.config.get_text_config().vocab_size, (7,))
    try:
        with upstream_behaviour(HISTORY_FIX):
            count, _ = generate_counting_graphs(model, prompts, 1, max_new_tokens=3, **SIZES)
    finally:
        model.to("cpu")

    assert count > 2


def test_without_the_indexer_fix_the_forward_is_not_one_graph(qwen4_exp, fresh_dynamo):
    """Upstream's indexer lists visible keys with ``nonzero``: a whole-graph compile of one step refuses it."""
    model = qwen4_exp.to("cpu")
    ids = workload_prompts(model.config.get_text_config().vocab_size, (8,))[0][None]
    step = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        step(input_ids=ids)  # the patched indexer: one graph
        torch._dynamo.reset()
        refused = (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)
        with upstream_behaviour(INDEXER_FIX), pytest.raises(refused):
            step(input_ids=ids)


def _train_step(model, ids, call=None):
    model.zero_grad(set_to_none=True)
    (model if call is None else call)(input_ids=ids, labels=ids).loss.backward()
    return {name: None if p.grad is None else p.grad.detach().cpu() for name, p in model.named_parameters()}


def test_a_compiled_training_step_has_upstreams_gradients(qwen4_exp, fresh_dynamo):
    """The indexer's mask is not differentiable: upstream gives its projection no gradient, and so do we,
    compiled in one graph."""
    model = copy.deepcopy(qwen4_exp).train()
    ids = workload_prompts(model.config.get_text_config().vocab_size, (16,))[0][None]
    with upstream_behaviour(INDEXER_FIX):
        expected = _train_step(model, ids)
    model.to("neuron")
    with count_graphs() as counted:
        grads = _train_step(model, ids.to("neuron"), torch.compile(model, backend="neuron", dynamic=False))

    assert counted.count == 1
    assert {n for n, g in grads.items() if g is None} == {n for n, g in expected.items() if g is None}
    assert expected["model.layers.1.self_attn.indexer.index_qk_proj.weight"] is None
    for name, want in expected.items():
        if want is not None:
            assert torch.allclose(grads[name], want, atol=1e-5, rtol=1e-4), name


def _masks():
    # 40 keys in blocks of 4: up to 10 blocks, of which the tiny config's budget keeps 4.
    causal = torch.ones(40, 40, dtype=torch.bool).tril()
    padded = causal[None].repeat(2, 1, 1)
    padded[1, :, :13] = False  # a left-padded row
    return {
        "causal": causal[None, None],
        "left padded pair": padded[:, None],
        "float mask": torch.zeros(1, 1, 40, 40).masked_fill(~causal, torch.finfo(torch.float32).min),
        "chunk after a history": causal[-8:][None, None],  # the last 8 queries: 32 keys come from the cache
    }


def _indexer_call(config, mask, seed):
    """Random inputs for one indexer call with ``mask``, and a cache holding the keys before the chunk."""
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(seed)
    batch, length, slots = mask.shape[0], mask.shape[-2], mask.shape[-1]
    hidden = torch.randn(batch, length, config.hidden_size, generator=generator)
    angles = torch.rand(batch, slots, config.indexer_head_dim, generator=generator) * 6
    earlier = torch.randn(batch, slots - length, config.indexer_head_dim, generator=generator)

    def cache():
        if slots == length:
            return None
        fresh = DynamicCache(config=config)
        fresh.update_indexer(earlier, config.layer_types.index("indexed_attention"))
        return fresh

    return (hidden, (angles.cos(), angles.sin()), mask), cache


@pytest.mark.parametrize("name", list(_masks()))
def test_the_static_indexer_selects_upstreams_tokens(qwen4_exp, name):
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

    # 16 indexer heads: a block scores exactly 0 (a tie, whose order upstream leaves to its topk
    # routine) only if all 16 head products are negative, which random inputs make vanishingly rare.
    config = copy.deepcopy(qwen4_exp.config.get_text_config())
    config.indexer_n_heads = 16
    indexed = config.layer_types.index("indexed_attention")
    indexer = Qwen4ExpTextQSAIndexer(config, indexed).eval()
    for seed in range(8):
        inputs, cache = _indexer_call(config, _masks()[name], seed)
        with torch.no_grad():
            ours = indexer(*inputs, cache())
            with upstream_behaviour(INDEXER_FIX):
                theirs = indexer(*inputs, cache())
        assert ours.shape == theirs.shape and torch.equal(ours, theirs), seed
        visible = inputs[2] if inputs[2].dtype == torch.bool else inputs[2] == 0
        assert (ours.sum() < visible.sum()), "the budget drops no key: the selection is not exercised"


def test_of_blocks_scored_equal_the_earlier_one_is_kept(qwen4_exp):
    """Zero scores tie: the selection is then the earlier block, whatever the number of blocks."""
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

    config = qwen4_exp.config.get_text_config()
    indexer = Qwen4ExpTextQSAIndexer(config, config.layer_types.index("indexed_attention")).eval()
    torch.nn.init.zeros_(indexer.index_qk_proj.weight)  # every block scores 0
    for slots in (24, 40, 64):
        mask = torch.ones(slots, slots, dtype=torch.bool).tril()[None, None]
        hidden = torch.randn(1, slots, config.hidden_size)
        angles = torch.zeros(1, slots, config.indexer_head_dim)
        with torch.no_grad():
            selected = indexer(hidden, (angles.cos(), angles.sin()), mask, None)
        # The last query sees every slot, in whole blocks: the budget's blocks are the first ones.
        assert selected[0, 0, -1].nonzero().flatten().tolist() == list(range(config.indexer_budget)), slots


def test_the_history_keeps_max_cache_len_slots_through_reorder_and_reset(qwen4_exp):
    from transformers import StaticCache

    model = qwen4_exp.to("cpu")
    config = model.config.get_text_config()
    cache = StaticCache(config=config, max_cache_len=16)
    layer = cache.layers[config.layer_types.index("indexed_attention")]
    with torch.no_grad():
        for tokens in (5, 1):
            model(input_ids=torch.full((2, tokens), 7), use_cache=True, **{cache_keyword(): cache})
            assert layer.indexer_position_ids.shape == (3, 2, 16)
    assert layer.indexer_position_ids[0, 0, :7].tolist() == list(range(6)) + [0]  # slots 0-5 written
    layer.indexer_position_ids[:, 1] = 100
    cache.reorder_cache(torch.tensor([1, 1]))
    assert (layer.indexer_position_ids == 100).all()
    cache.reset()
    assert layer.indexer_position_ids.shape == (3, 2, 16) and not layer.indexer_position_ids.any()


def test_the_fixes_are_applied_and_documented():
    for name in (INDEXER_FIX, HISTORY_FIX):
        fix = get_fix(name)
        assert fix.status == "applied", (name, fix.status)
        assert fix.gap
    assert indexed_attention.POSITION_HISTORY


