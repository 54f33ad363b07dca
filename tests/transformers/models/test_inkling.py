"""Inkling's expert layers under tensor parallelism: the shared experts run on their local shards and the
routed experts' fused gate/up parameter is split per half, so TP=2 equals one device."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import DistributedConfig

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.tiny_models import build_model, save_tiny_model
from hf_neuron.transformers.models.inkling import FUSED_EXPERTS, LOCAL_FIX, PACKED_FIX


def test_the_all_reduce_style_runs_its_module_on_local_tensors():
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES

    style = ALL_PARALLEL_STYLES.get("all_reduce")
    assert style.should_use_local_tensors(torch.nn.Linear(2, 2))
    with upstream_behaviour(LOCAL_FIX):
        assert not style.should_use_local_tensors(torch.nn.Linear(2, 2))


def test_inklings_fused_experts_are_split_per_half_and_a_user_plan_wins():
    model = build_model("inkling_text")
    glob, layer = f"model.{FUSED_EXPERTS}", f"model.{FUSED_EXPERTS.replace('*', '0')}"
    if not get_fix(PACKED_FIX).active:
        # Transformers 5.25 and later: the TP plan leaves the routed experts to the expert-parallel plan
        assert get_fix(PACKED_FIX).status == "closed", get_fix(PACKED_FIX).reason
        assert glob not in model.tp_plan and FUSED_EXPERTS in model.config.base_model_ep_plan
        return
    assert model.tp_plan[glob] == "packed_colwise"
    assert model._resolve_parallel_plans(DistributedConfig(tp_size=2))[0][layer] == "packed_colwise"
    user = {**model.tp_plan, glob: "colwise"}
    assert model._resolve_parallel_plans(DistributedConfig(tp_size=2, tp_plan=user))[0][layer] == "colwise"


#: The shared experts' entries of Inkling's plan in Transformers 5.23 and 5.24 (bare parameters sharded,
#: the owner all-reduced); later releases leave them out of the plan, and a checkpoint may still bring them.
SHARED_EXPERTS_ALL_REDUCE = {
    "layers.*.mlp.shared_experts.gate_proj": "colwise",
    "layers.*.mlp.shared_experts.up_proj": "colwise",
    "layers.*.mlp.shared_experts.down_proj": "rowwise",
    "layers.*.mlp.shared_experts": "all_reduce",
}


@pytest.fixture(scope="module")
def inkling_dir(tmp_path_factory):
    return save_tiny_model("inkling_text", tmp_path_factory.mktemp("inkling"), seed=0)


@pytest.fixture(scope="module")
def shared_experts_all_reduce_dir(tmp_path_factory):
    """The tiny Inkling whose checkpoint plan shards the shared experts with the "all_reduce" style."""
    path = save_tiny_model("inkling_text", tmp_path_factory.mktemp("inkling-all-reduce"), seed=0)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["base_model_tp_plan"] = {**build_model("inkling_text").config.base_model_tp_plan,
                                    **SHARED_EXPERTS_ALL_REDUCE}
    config_file.write_text(json.dumps(config))
    return path


@pytest.mark.distributed
def test_inkling_tp2_equals_one_device(inkling_dir, tp2_record):
    record = tp2_record("inkling_text", inkling_dir)
    assert record["ok"], record["reason"]
    assert record["details"]["max_abs_diff"] <= 1e-4


@pytest.mark.distributed
def test_shared_experts_all_reduced_equal_one_device_only_with_local_params(shared_experts_all_reduce_dir,
                                                                           tp2_record):
    record = tp2_record("inkling_text", shared_experts_all_reduce_dir)
    assert record["ok"], record["reason"]
    assert record["details"]["sharded_fraction"] > 0
    upstream = tp2_record("inkling_text", shared_experts_all_reduce_dir, env={"HF_NEURON_DISABLE": LOCAL_FIX})
    assert not upstream["ok"] and "mixed torch.Tensor and DTensor" in upstream["reason"], upstream


@pytest.mark.distributed
def test_without_the_packed_split_tp2_logits_differ(inkling_dir, tp2_record):
    upstream = tp2_record("inkling_text", inkling_dir, env={"HF_NEURON_DISABLE": PACKED_FIX})
    if get_fix(PACKED_FIX).active:
        assert not upstream["ok"] and "logits differ" in upstream["reason"], upstream
    else:  # upstream's own plan no longer splits the fused parameter (see the plan test above)
        assert upstream["ok"], upstream
