"""Tensor-parallel loading of checkpoint tensors that fuse several parameters (HRM's ``gqkv_proj``).

Some checkpoints store several parameters in one tensor: HRM's ``attn.gqkv_proj`` holds the gate,
query, key and value projections one after the other, and its ``mlp.gate_up_proj`` the gate and up
projections. Transformers' loader splits such a tensor in equal parts (a ``Chunk`` converter), and
under tensor parallelism it reads each rank's part of the tensor first ("shard-on-read"), with the
placement of the first parameter it fills: ``Shard(0)`` for a column-parallel projection. On the fused
tensor that placement is a contiguous half of all its rows, so rank 0 reads the gate and query rows,
and splitting that half gives each parameter rows of another projection: every sharded projection
holds wrong weights, and TP=2 logits differ from one device (0.015 on a tiny HRM).

``tp-shard-on-read-fused-checkpoint-tensors``: a tensor read for a parameter it is a whole multiple of
along the sharded dimension (and equal to along the others) is read per part: this rank's share of
each of the ``N`` equal parts, one after the other (DTensor's ``_StridedShard(dim, split_factor=N)``).
The split then gives each parameter its own rows of its own projection.
"""

from __future__ import annotations

import copy
import types

import torch

from hf_neuron.patching import fix, original, wrap

FIX_NAME = "tp-shard-on-read-fused-checkpoint-tensors"
# Waits for the loader, which imports the sharding module while it initialises itself.
LOADER_MODULE = "transformers.core_model_loading"

# The global shape of the parameter a shard-on-read was made for (upstream keeps only its first dim).
_PARAM_SHAPE = "_hf_neuron_param_shape"


def _fused_placements(placements, source_shape, param_shape):
    """The placements that read ``source`` part by part, when it fuses equal parts of ``param_shape``."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    if param_shape is None or len(source_shape) != len(param_shape):
        return None
    ndim = len(param_shape)
    dims = {p.dim % ndim for p in placements if type(p) is Shard}
    fused = {d: source_shape[d] // param_shape[d] for d in dims
             if param_shape[d] and source_shape[d] % param_shape[d] == 0 and source_shape[d] > param_shape[d]}
    others_equal = all(source_shape[d] == param_shape[d] for d in range(ndim) if d not in fused)
    if len(fused) != 1 or not others_equal:
        return None
    (dim, parts), = fused.items()
    return tuple(_StridedShard(dim, split_factor=parts) if type(p) is Shard and p.dim % ndim == dim else p
                 for p in placements)


def _record_param_shape(original_fn, self, param, *args, **kwargs):
    original_fn(self, param, *args, **kwargs)
    self.__dict__[_PARAM_SHAPE] = tuple(param.shape)


def _read_fused_tensor_per_part(original_fn, self, source, tensor_idx=None, *args, **kwargs):
    shape = tuple(source.shape) if isinstance(source, torch.Tensor) else tuple(source.get_shape())
    param_shape = self.__dict__.get(_PARAM_SHAPE)
    # A tensor of the parameter's rank is a whole tensor (a list index then only counts the tensors
    # a converter collects); one rank lower is one expert's slice, which upstream places itself.
    if param_shape is not None and len(shape) == len(param_shape):
        placements = _fused_placements(self.placements, shape, param_shape)
        if placements is not None:
            per_part = copy.copy(self)
            per_part.placements = placements
            return original_fn(per_part, source, tensor_idx, *args, **kwargs)
    return original_fn(self, source, tensor_idx, *args, **kwargs)


def _rank_one_of_two_reads_fused_rows_contiguously() -> bool:
    """Upstream's read of a fused [gate; up] tensor of 8 rows for rank 1 of 2 of a ``Shard(0)`` parameter
    of 4 rows, split in two: whether the parts differ from rank 1's rows of the gate and of the up part."""
    from torch.distributed.tensor import Shard
    from transformers.core_model_loading import Chunk
    from transformers.distributed.sharding_utils import DtensorShardOperation

    read = object.__new__(DtensorShardOperation)  # the loader's operation, on a stand-in mesh of 2 ranks
    read.device_mesh = types.SimpleNamespace(ndim=1, get_local_rank=lambda: 1, size=lambda: 2)
    read.placements, read.param_ndim = (Shard(0),), 2
    source = torch.arange(8.0).reshape(8, 1)  # rows 0-3 gate, 4-7 up
    local = original(DtensorShardOperation, "shard_tensor")(read, source)
    parts = Chunk(dim=0).convert({"fused": local}, source_patterns=["fused"], target_patterns=["gate", "up"])
    return parts["gate"].flatten().tolist() != [2.0, 3.0] or parts["up"].flatten().tolist() != [6.0, 7.0]


@fix(FIX_NAME, "transformers", _rank_one_of_two_reads_fused_rows_contiguously, waits_for=LOADER_MODULE)
def patch_read_fused_tensors_per_part() -> None:
    """A checkpoint tensor fusing several projections (HRM's ``gqkv_proj``) is sharded as one: TP weights are wrong.

    Gap: under tensor parallelism the loader reads each rank's part of a checkpoint tensor with the
    placement of the first parameter it fills; a fused tensor that a ``Chunk`` converter splits into
    ``N`` parameters is then read as one contiguous block, and each parameter gets rows of another
    projection (TP=2 logits of a tiny HRM off by 0.015). Detected by running upstream's shard-on-read
    of a fused tensor for rank 1 of 2 on a stand-in mesh and splitting it. Patch: a tensor that is ``N``
    times its parameter along the sharded dimension (and equal along the others) is read as this
    rank's share of each of its ``N`` parts (``_StridedShard``), which the split hands to each parameter.
    """
    from transformers.distributed.sharding_utils import DtensorShardOperation

    wrap(FIX_NAME, DtensorShardOperation, "__init__", _record_param_shape)
    wrap(FIX_NAME, DtensorShardOperation, "shard_tensor", _read_fused_tensor_per_part)
