"""Compiled generation for Qwen4-Exp's indexed (query-selected sparse) attention.

Each indexed attention layer of Qwen4-Exp first runs an *indexer*: it pools the visible keys in blocks
of ``indexer_compress_ratio`` tokens, scores each block against the query, and lets the query attend
only to the best ``indexer_budget`` tokens' blocks (plus the incomplete last block). Upstream's code is
right but cannot be compiled into the bounded graph set generation promises on Neuron:

- ``qwen4-exp-indexer-static-shapes``: the indexer loops over every (batch row, query) pair in Python
  and lists the visible keys with ``torch.nonzero``, whose output size depends on the mask's values.
  A static-shape compiler cannot trace it: each call breaks into dozens of graphs, and each new count
  of visible keys (every decode step) is another compile.
- ``indexed-cache-fixed-position-history``: the model keeps the position ids of every token seen on
  the first indexed cache layer and concatenates each step's positions to them, so the history, and
  every rotary table computed from it, grows by a step's length at each forward: one graph per length.

With both closed, the history is a fixed buffer of ``max_cache_len`` slots, the indexer's shapes depend
only on the batch size, the chunk length and the cache length, and generation compiles one prefill
chunk graph and one decode graph per batch size, with the tokens of upstream's eager generation.

An indexer's result is a selection (a mask, or the indices of the chosen blocks): no gradient reaches
its parameters in an eager training step. A compiled training step gives them gradients of zeros
instead, which an optimizer does not skip (weight decay, moment updates). Qwen4-Exp's static indexer
runs without autograd for that reason (:mod:`.deepseek_v4` does the same for DeepSeek V4's lightning
indexer).
"""

from __future__ import annotations

import math
import sys

import torch

from hf_neuron.patching import fix, replace, wrap
from hf_neuron.transformers.generation.steps import cache_keyword

INDEXER_FIX = "qwen4-exp-indexer-static-shapes"
HISTORY_FIX = "indexed-cache-fixed-position-history"

QWEN4_EXP_MODULE = "transformers.models.qwen4_exp.modeling_qwen4_exp"

#: Where a static indexed cache layer keeps its fixed position history (``[position dims, batch,
#: max_cache_len]``, long): read by the early cache allocation, which allocates it ahead.
POSITION_HISTORY = "_hf_neuron_position_history"


def _tiny_config():
    """A one-layer Qwen4-Exp text config for the probes (configuration only)."""
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig

    return Qwen4ExpTextConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, layer_types=["indexed_attention"], moe_intermediate_size=8, shared_expert_intermediate_size=8,
        num_experts=2, num_experts_per_tok=1, hc_count=2, hc_lowrank=4, indexer_n_heads=2, indexer_kv_heads=1,
        indexer_head_dim=8, indexer_budget=4, indexer_compress_ratio=2, linear_num_key_heads=1,
        linear_num_value_heads=1, linear_key_head_dim=8, linear_value_head_dim=8)


# ----------------------------------------------------------------------------- the indexer


def _static_indexer(original_fn, self, hidden_states, position_embeddings, attention_mask, *args, **kwargs):
    """Upstream's selection for every (batch row, query) at once, in fixed shapes.

    Per row and query, upstream lists the visible key slots in order, pools them in blocks of
    ``compress_ratio`` (the incomplete last block is always kept), scores each block and keeps the top
    ``block_topk``. Here the visible slots are put first by a stable sort, every possible block is
    pooled and scored, and blocks past the row's complete ones are scored ``-inf``, so the same blocks
    win. The pooling, normalisation, rotation and scoring are upstream's operations in upstream's order.
    Where blocks tie at the cut, upstream's choice is whatever its ``topk`` routine returns; here the
    earlier block wins.
    """
    cache = kwargs.pop("cache", kwargs.pop("past_key_values", args[0] if args else None))
    # The indexer's result is a boolean mask: nothing it computes is differentiable, as upstream's
    # integer indices are not. Without this a compiled training step would give its projection a
    # zero gradient where upstream gives none.
    with torch.no_grad():
        return _select(self, hidden_states, position_embeddings, attention_mask, cache)


def _select(self, hidden_states, position_embeddings, attention_mask, cache):
    apply_rotary = sys.modules[type(self).__module__].apply_rotary_pos_emb
    batch, length, _ = hidden_states.shape
    ratio, head_dim = self.compress_ratio, self.index_head_dim
    full_cos, full_sin = position_embeddings

    q, token_keys = torch.split(self.index_qk_proj(hidden_states),
                                [self.index_n_heads * head_dim, self.index_kv_heads * head_dim], dim=-1)
    q = self.q_layernorm(q.reshape(batch, length, -1, head_dim))
    q = apply_rotary(q, cos=full_cos[:, -length:, :], sin=full_sin[:, -length:, :], unsqueeze_dim=2)
    keys = token_keys.reshape(batch, length, -1, head_dim).squeeze(2)
    if cache is not None:
        keys = cache.update_indexer(keys, self.layer_idx)

    visible = (attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0)[:, 0]
    visible = visible.expand(batch, length, -1)
    slots = visible.shape[-1]
    blocks = slots // ratio
    if blocks == 0:
        return visible.unsqueeze(1)
    complete = visible.sum(-1) // ratio  # per (row, query): blocks of visible keys
    # Visible slots first, each group in slot order: the first complete * ratio are upstream's blocks.
    order = torch.argsort((~visible).to(torch.int32), dim=-1, stable=True)
    block_slots = order[..., : blocks * ratio].reshape(batch, length, blocks, ratio)
    rows = torch.arange(batch, device=keys.device).view(batch, 1, 1)

    pooled = keys[rows[..., None], block_slots].float().mean(dim=-2).to(keys.dtype)
    pooled = self.k_layernorm(pooled)
    starts = _position_index(block_slots[..., 0], full_cos.shape[1], slots, length, cache, self.layer_idx)
    block_keys = apply_rotary(pooled.unsqueeze(-2), cos=full_cos[rows, starts], sin=full_sin[rows, starts],
                              unsqueeze_dim=-2).squeeze(-2)

    scores = torch.matmul(q.float(), block_keys.float().transpose(-1, -2)).transpose(-1, -2)
    scores = torch.relu(scores).sum(dim=-1) / math.sqrt(head_dim)
    valid = torch.arange(blocks, device=scores.device) < complete[..., None]
    # Upstream's ``topk`` leaves the order of equal scores to the sorting routine; a block scored 0
    # (every head's product negative, zeroed by the ReLU) often ties. Here the earlier block wins a tie.
    ranked = torch.sort(scores.masked_fill(~valid, float("-inf")), dim=-1, descending=True, stable=True).indices
    top = ranked[..., : min(self.block_topk, blocks)]
    chosen = torch.zeros_like(valid).scatter(-1, top, valid.gather(-1, top))

    rank = visible.cumsum(-1) - 1  # each visible slot's place among the row's visible slots
    in_tail = rank >= complete[..., None] * ratio
    in_chosen = chosen.gather(-1, (rank // ratio).clamp(0, blocks - 1))
    return (visible & (in_tail | in_chosen)).unsqueeze(1)


def _position_index(block_starts, positions, slots, length, cache, layer_idx):
    """Where each block's first slot finds its rotary entry in the model's tables.

    The tables cover the position history followed by the current tokens. A growing history (a
    dynamic cache, or a static one without the fixed history) holds every slot in order, so slot
    ``j`` is entry ``j``. The fixed history holds ``slots`` entries followed by the ``length``
    current tokens, whose own slots were not yet written when the tables were made: those read
    their entry after the history.
    """
    if positions != slots + length or cache is None:
        return block_starts.clamp(max=positions - 1)
    written = cache.layers[layer_idx].indexer_cumulative_length - length  # slots filled before this step
    current = (block_starts >= written) & (block_starts < written + length)
    return torch.where(current, block_starts - written + slots, block_starts)


def _indexer_needs_dynamic_shapes() -> bool:
    """Whether upstream's indexer runs an op whose output shape depends on values (no static trace)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

    from hf_neuron.patching import original

    config = _tiny_config()
    forward = original(Qwen4ExpTextQSAIndexer, "forward")
    indexer = Qwen4ExpTextQSAIndexer(config, 0).eval()
    length = 4
    rotary = config.head_dim if config.indexer_head_dim is None else config.indexer_head_dim
    with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True):
        hidden = torch.zeros(1, length, config.hidden_size)
        cos = torch.ones(1, length, rotary)
        mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
        try:
            forward(indexer, hidden, (cos, cos), mask, None)
        except (DynamicOutputShapeException, DataDependentOutputException):
            return True
    return False


@fix(INDEXER_FIX, "transformers", _indexer_needs_dynamic_shapes, waits_for=QWEN4_EXP_MODULE)
def patch_static_indexer() -> None:
    """Qwen4-Exp's sparse-attention indexer cannot be compiled in static shapes: generation recompiles at every step.

    Gap: the indexer loops over each batch row and query in Python and lists the visible keys with
    ``torch.nonzero``, whose output size depends on the values of the mask; a compiled forward breaks
    around it into dozens of graphs and recompiles for each new number of visible keys (108 graphs for
    a tiny model's workload where 2 per batch size are promised). Detected by running upstream's
    indexer on fake tensors of static shapes, which refuse such an op. Patch: the same selection for
    all rows and queries at once, in shapes fixed by the batch, the chunk and the cache length (see
    ``_static_indexer``).
    """
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

    wrap(INDEXER_FIX, Qwen4ExpTextQSAIndexer, "forward", _static_indexer)


# ----------------------------------------------------------------------------- the position history


def _history_get(layer):
    return layer.__dict__.get(POSITION_HISTORY)


def _history_set(layer, value) -> None:
    """Keep what the model stores as its position history in the layer's fixed buffer.

    The model assigns the previous history (this getter's buffer) followed by the current positions,
    or, before the first forward, the current positions alone; a beam reorder assigns a reordered
    copy of the whole buffer; ``reset`` assigns None, which empties it.
    """
    history = layer.__dict__.get(POSITION_HISTORY)
    if value is None:
        if history is not None:
            history.zero_()
        return
    slots = layer.max_cache_len
    if history is None:
        history = torch.zeros((*value.shape[:-1], slots), dtype=value.dtype, device=value.device)
        layer.__dict__[POSITION_HISTORY] = history
    elif value.shape[-1] == slots:
        history.copy_(value)
        return
    new = value[..., slots:] if value.shape[-1] > slots else value
    written = getattr(layer, "indexer_cumulative_length", None)
    index = torch.arange(new.shape[-1], device=history.device)
    if isinstance(written, torch.Tensor):
        index = index + written
    history.index_copy_(history.dim() - 1, index, new.to(history.dtype))


POSITION_HISTORY_PROPERTY = property(_history_get, _history_set, doc=(
    "Position ids of the tokens in each cache slot, ``[position dims, batch, max_cache_len]`` (hf_neuron's "
    "fixed history: slots not yet written hold zeros)."))


def _history_grows() -> bool:
    """Whether a static cache's position history grows with each forward of a tiny Qwen4-Exp."""
    from transformers import StaticCache
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextModel

    from hf_neuron.patching import upstream_behaviour

    config = _tiny_config()
    torch.manual_seed(0)
    model = Qwen4ExpTextModel(config).eval()
    lengths = []
    with torch.no_grad(), upstream_behaviour(HISTORY_FIX, INDEXER_FIX):
        cache = StaticCache(config=config, max_cache_len=8)
        layer = cache.layers[config.layer_types.index("indexed_attention")]
        for tokens in (3, 1):
            model(input_ids=torch.ones(1, tokens, dtype=torch.long), use_cache=True, **{cache_keyword(): cache})
            lengths.append(layer.indexer_position_ids.shape[-1])
    return lengths[0] != lengths[1]


@fix(HISTORY_FIX, "transformers", _history_grows, waits_for=QWEN4_EXP_MODULE)
def patch_fixed_position_history() -> None:
    """A static indexed cache's position history grows at every step: each step is a new graph.

    Gap: Qwen4-Exp stores the position ids of every token seen on its first indexed cache layer by
    concatenating each forward's positions to the stored ones, and computes its rotary tables over
    all of them, so a static cache's compiled forward sees a longer input at every prefill chunk and
    decode step. Detected by running a tiny Qwen4-Exp twice through a static cache and comparing the
    history's length. Patch: on ``StaticIndexedLayer`` the history is a buffer of ``max_cache_len``
    slots (allocated ahead with the cache), the model's concatenation then has a fixed length, and
    each forward's positions are written in place at their slots.
    """
    from transformers.cache_utils import StaticIndexedLayer

    replace(HISTORY_FIX, StaticIndexedLayer, "indexer_position_ids", POSITION_HISTORY_PROPERTY)
