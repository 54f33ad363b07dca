"""Tensor parallelism (``from_pretrained(distributed_config=DistributedConfig(tp_size=N))``) on Neuron.

Upstream already initialises the "neuron" process group and device mesh from the current
accelerator; two gaps remain:

- ``dtensor-embedding-mask-without-index-put``: the vocabulary-parallel embedding
  (``"embedding_rowwise"``, the default for ``embed_tokens``) runs through DTensor's
  ``_MaskPartial``, which zeroes out-of-shard token ids with boolean-mask assignments
  (``x[mask] = 0``). Inside a compiled graph that is ``aten.index_put`` with a boolean index, which
  needs ``nonzero`` and does not compile on Neuron: every tensor-parallel ``generate`` fails.
- ``tp-plan-constraints``: an architecture without a TP plan, or with attention heads that do not
  divide by ``tp_size``, is either rejected late or sharded into half heads; we raise first, naming
  the architecture and the constraint.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, replace, wrap

MASK_FIX = "dtensor-embedding-mask-without-index-put"
PLAN_FIX = "tp-plan-constraints"


# ----------------------------------------------------------------------------- DTensor masks


def _mask_tensor(tensor, local_offset_on_dim, local_shard_size):
    mask = (tensor < local_offset_on_dim) | (tensor >= local_offset_on_dim + local_shard_size)
    masked_tensor = torch.where(mask, torch.zeros_like(tensor), tensor - local_offset_on_dim)
    return mask, masked_tensor


def _apply_mask(self, tensor):
    if self.refcount == 0 or self.data is None:
        raise RuntimeError("MaskBuffer has not been materialized")
    mask = self.data if tensor.ndim == self.data.ndim else self.data.unsqueeze(-1)
    tensor.masked_fill_(mask, 0.0)


def _masks_use_boolean_index_put() -> bool:
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial
    from torch.fx.experimental.proxy_tensor import make_fx

    def embedding_masks(ids, output):
        mask, _ = _MaskPartial._mask_tensor(ids, 2, 3)
        buffer = MaskBuffer()
        buffer.materialize_mask(mask)
        buffer.apply_mask(output)
        return output

    graph = make_fx(embedding_masks)(torch.arange(8), torch.ones(8, 2))
    return any(
        node.op == "call_function" and "index_put" in str(node.target) for node in graph.graph.nodes
    )


@fix(MASK_FIX, "transformers", _masks_use_boolean_index_put, waits_for="transformers.distributed.tensor_parallel")
def patch_dtensor_embedding_masks() -> None:
    """Vocabulary-parallel embeddings do not compile on Neuron (boolean-mask ``index_put``).

    Gap: DTensor's ``_MaskPartial`` (used for ``"embedding_rowwise"``, Transformers' default TP
    style for ``embed_tokens``) masks token ids outside the local vocabulary shard with
    ``x[mask] = 0`` and zeroes their embeddings with ``out[mask, :] = 0``: ``aten.index_put`` with a
    boolean index, which needs ``nonzero`` and fails to compile on Neuron. Detected by tracing both
    mask steps and finding ``index_put``. Patch: the same masks with ``torch.where`` and
    ``masked_fill_`` (same values, static shapes).
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial

    replace(MASK_FIX, _MaskPartial, "_mask_tensor", staticmethod(maybe_run_for_local_tensor(_mask_tensor)))
    replace(MASK_FIX, MaskBuffer, "apply_mask", _apply_mask)


# ----------------------------------------------------------------------------- plan constraints

_HEAD_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "Wqkv")


def _head_constraint_violations(model, tp_size: int, tp_plan: dict[str, str]) -> list[str]:
    if not any(name.rsplit(".", 1)[-1] in _HEAD_PROJECTIONS and "colwise" in style for name, style in tp_plan.items()):
        return []  # attention is not sharded by heads
    config = model.config.get_text_config(decoder=True)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    problems = []
    if isinstance(heads, int) and heads % tp_size:
        problems.append(f"num_attention_heads={heads} is not divisible by tp_size={tp_size}")
    if isinstance(kv_heads, int) and kv_heads != heads and kv_heads % tp_size:
        problems.append(f"num_key_value_heads={kv_heads} is not divisible by tp_size={tp_size}")
    return problems


def _resolve_plans_checking_heads(original, self, distributed_config, *args, **kwargs):
    plans = original(self, distributed_config, *args, **kwargs)
    tp_size = distributed_config.tp_size
    if tp_size > 1:
        problems = _head_constraint_violations(self, tp_size, plans[0])
        if problems:
            valid = [n for n in range(2, 65) if not _head_constraint_violations(self, n, plans[0])][:6]
            raise ValueError(
                f"Tensor parallelism shards attention by heads, but for {type(self).__name__} "
                f"(model_type {self.config.model_type!r}) {' and '.join(problems)}. Use a tp_size that divides "
                f"the head counts (e.g. {', '.join(map(str, valid)) or 'none up to 64'}) and launch that many "
                f"processes per model replica."
            )
    return plans


def _plans_accept_uneven_heads() -> bool:
    from transformers import DistributedConfig, LlamaConfig
    from transformers.distributed.mixin import DistributedMixin

    class _Probe(torch.nn.Module, DistributedMixin):
        def __init__(self):
            super().__init__()
            self.config = LlamaConfig(num_attention_heads=4, num_key_value_heads=4, hidden_size=8)
            self.q_proj = torch.nn.Linear(8, 8)
            self._tp_plan = {"q_proj": "colwise"}
            self._ep_plan, self._fsdp_plan = {}, {}

    try:
        _Probe()._resolve_parallel_plans(DistributedConfig(tp_size=3))
    except ValueError:
        return False
    return True


@fix(PLAN_FIX, "transformers", _plans_accept_uneven_heads, waits_for="transformers.distributed.mixin")
def patch_tp_plan_constraints() -> None:
    """A head count that ``tp_size`` does not divide fails late with an unrelated shape error.

    Gap: ``_resolve_parallel_plans`` checks that a TP plan exists but not that the attention heads
    split evenly, so ``tp_size=3`` on a 4-head model (or ``tp_size=4`` with 2 KV heads) loads, then
    fails inside the compiled forward (``shape '[2, 16, -1, 16]' is invalid``). Detected by
    resolving a plan for 4 heads with ``tp_size=3``. Patch: before any weight is loaded, a ValueError names the architecture, the
    head counts and the tp sizes that work.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(PLAN_FIX, DistributedMixin, "_resolve_parallel_plans", _resolve_plans_checking_heads)
