"""Every hf_neuron TP plan, and the upstream plans with a tiny model: TP=2 output equals TP=1, loaded
both ways diffusers supports.

One torchrun launch (2 ranks, backend "neuron" on the simulator) checks every class of
``hf_neuron.testing.tiny_diffusers.TINY`` through ``enable_parallelism`` and ``from_pretrained(parallel_config=)``.
"""

from __future__ import annotations

import pytest

from hf_neuron.diffusers import tp_plans  # noqa: F401  (fills PLANS, whether or not diffusers is imported yet)
from hf_neuron.diffusers.plan_registry import PLANS
from hf_neuron.testing.tiny_diffusers import TINY

from diffusers_adapter_helpers import load_records, run_torchrun


@pytest.fixture(scope="module")
def tp_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp") / "neuron.json"
    run_torchrun("hf_neuron.compat.diffusers.tp_check", "--device", "neuron", "--out", str(out))
    return load_records(out)


def test_every_plan_has_a_tiny_proof():
    assert set(PLANS) <= set(TINY), sorted(set(PLANS) - set(TINY))
    assert len(PLANS) >= 57  # the README's figure


# Upstream's own plans, checked by the same launch (their classes have a tiny model too).
UPSTREAM_PLANS = (
    "FluxTransformer2DModel", "Flux2Transformer2DModel", "QwenImageTransformer2DModel", "QwenImage21Transformer2DModel",
)
#: Plans that leave more of the block weights replicated: Sana-Video's feed-forward is made of Conv2d
#: layers (GLUMBTempConv), which colwise/rowwise do not shard (about 43% of the released model's blocks).
MIN_SHARDED_SHARE = {"SanaVideoTransformer3DModel": 0.40}


@pytest.mark.parametrize("class_name", sorted(PLANS) + list(UPSTREAM_PLANS))
@pytest.mark.distributed
def test_tp2_equals_tp1(tp_results, class_name):
    record = tp_results[class_name]
    assert record["ok"], {k: v for k, v in record.items()}
    for mode in ("memory", "pretrained"):
        assert record[mode]["max_abs_diff"] <= 1e-5
    # The plan shards the bulk of the block weights (the rest: AdaLN modulation, norms, convs).
    assert record["sharded_fraction"] >= MIN_SHARDED_SHARE.get(class_name, 0.45)


# SD3's attention processor splits heads with `attn.heads`; Wan normalises q/k across all heads.
NEEDS_SUPPORT = ("SD3Transformer2DModel", "WanTransformer3DModel")


@pytest.mark.distributed
def test_plans_alone_do_not_shard_correctly(tmp_path):
    """With `diffusers.tp_plan_support` off (plans still installed) these classes do not match TP=1."""
    out = tmp_path / "without_support.json"
    run_torchrun("hf_neuron.compat.diffusers.tp_check", "--device", "neuron", "--modes", "memory",
                 "--classes", ",".join(NEEDS_SUPPORT), "--out", str(out),
                 env={"HF_NEURON_DISABLE": "diffusers.tp_plan_support"})
    records = load_records(out)
    assert {name: records[name]["ok"] for name in NEEDS_SUPPORT} == dict.fromkeys(NEEDS_SUPPORT, False), records
