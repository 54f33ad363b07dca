"""Gemma 3n's activation sparsity under tensor parallelism: the cutoff's statistics span the whole
intermediate width, so TP=2 equals one device; without the fix each rank cuts at its own slice's."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import upstream_behaviour
from hf_neuron.tiny_models import build_model, save_tiny_model
from hf_neuron.transformers.models.gemma3n import FIX_NAME, _sharded_gate_changes_the_cutoff


def test_an_unsharded_mlp_runs_upstreams_cutoff():
    model = build_model("gemma3n").eval()
    mlp = next(layer.mlp for layer in model.model.layers if layer.mlp.activation_sparsity > 0)
    gate = torch.randn(2, 3, mlp.intermediate_size)
    with upstream_behaviour(FIX_NAME):
        expected = mlp._gaussian_topk(gate)
    assert torch.equal(mlp._gaussian_topk(gate), expected)


def test_detection_sees_the_gap_on_the_installed_release():
    assert _sharded_gate_changes_the_cutoff() is True


@pytest.mark.distributed
def test_gemma3n_tp2_equals_one_device_only_with_the_fix(tmp_path, tp2_record):
    model_dir = save_tiny_model("gemma3n", tmp_path / "gemma3n", seed=0)
    record = tp2_record("gemma3n", model_dir)
    assert record["ok"], record["reason"]
    assert record["details"]["max_abs_diff"] <= 1e-4
    upstream = tp2_record("gemma3n", model_dir, env={"HF_NEURON_DISABLE": FIX_NAME})
    assert not upstream["ok"] and "logits differ from single device" in upstream["reason"], upstream
