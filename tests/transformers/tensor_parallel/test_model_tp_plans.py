"""hf_neuron's TP plans for architectures Transformers ships without one: TP=2 equals one device.

One torchrun launch (2 ranks, backend "neuron" on the simulator) loads every planned tiny architecture
with ``DistributedConfig(tp_size=2)`` and compares logits and greedy tokens with a single device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import DistributedConfig

from hf_neuron.tiny_models import build_model, save_tiny_model
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.tensor_parallel import plan_support
from hf_neuron.transformers.tensor_parallel import experts
from hf_neuron.transformers.tensor_parallel.experts import EXPERTS_FIX
from hf_neuron.transformers.tensor_parallel.plans import PLANS

WORKER = Path(__file__).with_name("_tp_plans_worker.py")
# Variants the plans cover beyond the tiny defaults: Recurrent Gemma's published checkpoints have one
# key/value head (kept whole on every rank; the default tiny model has 4, which split).
VARIANTS = {"recurrent_gemma_one_kv_head": ("recurrent_gemma", {"num_key_value_heads": 1})}
# Whose plans need hf_neuron's styles or per-rank sizes (the plan dict alone does not shard them correctly).
NEEDS_SUPPORT = ("gpt2", "opt", "mpt", "rwkv")


def _run(tmp_path, names: dict, env: dict | None = None) -> dict:
    out = tmp_path / "tp.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
               str(out), *(f"{name}={path}" for name, path in names.items())]
    env = {**os.environ, "HF_NEURON_SIMULATOR": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp-plan-models")
    dirs = {arch: save_tiny_model(arch, root / arch, seed=0) for arch in PLANS}
    for name, (arch, overrides) in VARIANTS.items():
        dirs[name] = save_tiny_model(arch, root / name, seed=0, **overrides)
    return dirs


@pytest.fixture(scope="module")
def tp_results(tiny_dirs, tmp_path_factory):
    return _run(tmp_path_factory.mktemp("tp-plans"), tiny_dirs)


@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted([*PLANS, *VARIANTS]))
def test_tp2_equals_one_device(tp_results, name):
    record = tp_results[name]
    assert record["ok"], record["reason"]
    assert record["details"]["max_abs_diff"] <= 1e-4
    # The plans shard most of the decoder layers' weights; what stays whole is named in tp_plans (the
    # fused multi-query projection of Falcon and GPT-BigCode, Recurrent Gemma's recurrent blocks, RWKV's
    # gates). Zamba2 shards its shared attention only and Zaya its experts only.
    assert record["details"]["sharded_fraction"] >= {"zamba2": 0.15, "zaya": 0.4}.get(name, 0.6), record
    if name == "zaya":  # a mixture of experts: each rank holds half of them, and a training step matches CPU
        assert record["details"]["experts"]["expert_weights_per_rank"] == 0.5, record
        assert record["details"]["training"]["expert_gradients_compared"] > 0, record


@pytest.mark.distributed
def test_plans_alone_do_not_shard_correctly(tiny_dirs, tmp_path_factory, tmp_path):
    """With `tp-plan-support` off (plans still installed) these do not match one device. The same launch has
    the experts fix off too: a tiny Qwen3-MoE then keeps every expert on every rank, which the comparison
    refuses (the dense models above do not reach that fix, the MoE model does not need plan support)."""
    moe = save_tiny_model("qwen3_moe", tmp_path_factory.mktemp("moe") / "qwen3_moe", seed=0)
    records = _run(tmp_path, {**{name: tiny_dirs[name] for name in NEEDS_SUPPORT}, "qwen3_moe": moe},
                   env={"HF_NEURON_DISABLE": f"{plan_support.SUPPORT_FIX},{EXPERTS_FIX}"})
    assert {name: records[name]["ok"] for name in NEEDS_SUPPORT} == dict.fromkeys(NEEDS_SUPPORT, False), records
    if experts._tp_leaves_experts_whole():  # this release's TP plans leave the experts to expert parallelism
        assert not records["qwen3_moe"]["ok"]
        assert "routed experts not sharded under TP=2: each rank holds 100%" in records["qwen3_moe"]["reason"], records
    else:  # the release's own plans split every expert: nothing for the fix to do
        assert records["qwen3_moe"]["details"]["experts"]["expert_weights_per_rank"] == 0.5, records


def test_plans_are_installed_only_where_upstream_has_none():
    for arch in PLANS:
        model = build_model(arch)
        assert plan_support.plan_for(model) is PLANS[arch]
        assert model.config.base_model_tp_plan == PLANS[arch].plan
    # An upstream plan is never taken for ours.
    assert plan_support.plan_for(build_model("llama")) is None


def test_a_configuration_the_plan_does_not_cover_is_named_before_loading():
    model = build_model("falcon", new_decoder_architecture=True)
    with pytest.raises(ValueError, match="plan for falcon does not cover this configuration: .*multi-query"):
        model._resolve_parallel_plans(DistributedConfig(tp_size=2))


def test_a_size_the_tp_degree_does_not_divide_is_named():
    model = build_model("mpt")  # 4 heads
    with pytest.raises(ValueError, match=r"MptForCausalLM.*=4 .*tp_size=3"):
        model._resolve_parallel_plans(DistributedConfig(tp_size=3))


def test_one_key_value_head_stays_whole():
    model = build_model("recurrent_gemma", num_key_value_heads=1)
    tp_plan = model._resolve_parallel_plans(DistributedConfig(tp_size=2))[0]
    assert not any(key.endswith(("k_proj", "v_proj")) for key in tp_plan)
    assert any(key.endswith("q_proj") for key in tp_plan)
    assert plan_support.kv_heads_whole(model)


@pytest.mark.parametrize("arch", sorted(PLANS))
def test_without_the_plan_fix_the_architecture_cannot_be_sharded(arch):
    with upstream_behaviour(f"transformers.tp_plan.{arch}"):
        model = build_model(arch)
        with pytest.raises(ValueError, match="has no `tp_plan`"):
            model._resolve_parallel_plans(DistributedConfig(tp_size=2))
