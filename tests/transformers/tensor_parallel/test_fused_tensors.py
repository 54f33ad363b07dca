"""A checkpoint tensor fusing several projections (HRM's ``gqkv_proj``, ``gate_up_proj``) is read per part
under tensor parallelism, so each sharded projection holds its own rows and TP=2 equals one device."""

from __future__ import annotations

import pytest
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

from hf_neuron.patching import get_fix
from hf_neuron.transformers.tensor_parallel.fused_tensors import FIX_NAME, _fused_placements


def test_a_tensor_of_n_parts_along_the_sharded_dim_is_read_per_part():
    assert _fused_placements((Shard(0),), (32, 8), (8, 8)) == (_StridedShard(0, split_factor=4),)
    assert _fused_placements((Shard(-2),), (16, 8), (8, 8)) == (_StridedShard(0, split_factor=2),)


@pytest.mark.parametrize("placements, source, param", [
    ((Shard(0),), (8, 8), (8, 8)),  # the parameter's own tensor
    ((Shard(1),), (16, 8), (8, 8)),  # fused along a dimension that is not sharded
    ((Replicate(),), (16, 8), (8, 8)),
    ((Shard(0),), (16, 16), (8, 8)),  # larger along another dimension too: not equal parts
    ((Shard(0),), (12, 8), (8, 8)),  # not a whole multiple
    ((_StridedShard(0, split_factor=2),), (16, 8), (8, 8)),  # already read per part (a packed plan)
])
def test_other_tensors_keep_upstreams_placements(placements, source, param):
    assert _fused_placements(placements, source, param) is None


def test_the_detection_sees_the_gap_and_the_patched_read_gives_each_part_its_rows():
    import types

    import torch
    from transformers.core_model_loading import Chunk
    from transformers.distributed.sharding_utils import DtensorShardOperation

    from hf_neuron.transformers.tensor_parallel import fused_tensors as tp_loading

    assert tp_loading._rank_one_of_two_reads_fused_rows_contiguously()
    assert get_fix(FIX_NAME).status == "applied"
    read = object.__new__(DtensorShardOperation)  # rank 1 of 2, for a Shard(0) parameter of 4 rows
    read.device_mesh = types.SimpleNamespace(ndim=1, get_local_rank=lambda: 1, size=lambda: 2)
    read.placements, read.param_ndim = (Shard(0),), 2
    read.__dict__[tp_loading._PARAM_SHAPE] = (4, 1)
    local = read.shard_tensor(torch.arange(8.0).reshape(8, 1))  # rows 0-3 gate, 4-7 up
    parts = Chunk(dim=0).convert({"fused": local}, source_patterns=["fused"], target_patterns=["gate", "up"])
    assert (parts["gate"].flatten().tolist(), parts["up"].flatten().tolist()) == ([2.0, 3.0], [6.0, 7.0])


@pytest.mark.distributed
def test_hrm_tp2_equals_one_device_only_with_the_fix(tp2_only_with_the_fix):
    tp2_only_with_the_fix("hrm_text", FIX_NAME, "logits differ")
