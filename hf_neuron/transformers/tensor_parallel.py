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

from hf_neuron.transformers._patching import replace, wrap
from hf_neuron.transformers._registry import transformers_fix

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


@transformers_fix(MASK_FIX, "transformers.distributed.tensor_parallel", detect=_masks_use_boolean_index_put)
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
