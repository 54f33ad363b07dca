"""The adapter's named fixes: what they install, when they stand back, and the gap they close."""

from __future__ import annotations

import importlib
import subprocess
import sys

import diffusers  # noqa: F401  (activates the adapter)
import pytest

from hf_neuron.diffusers.plan_registry import PLANS
from hf_neuron.patching.sources import class_assigns
from hf_neuron.diffusers.repeated_blocks import REPEATED_BLOCKS
from hf_neuron.diffusers.tensor_parallel import plan_for
from hf_neuron.testing.tiny_diffusers import TINY
from hf_neuron.patching import all_fixes, get_fix, upstream_behaviour


def _module(name: str):
    return importlib.import_module(f"diffusers.models.transformers.{name}")


@pytest.mark.parametrize("class_name", sorted(PLANS))
def test_plan_installed_on_import(class_name):
    class_plan = PLANS[class_name]
    cls = getattr(_module(class_plan.module), class_name)
    assert plan_for(cls._tp_plan) is class_plan
    assert get_fix(f"diffusers.tp_plan.{class_name}").active


def test_detection_reads_the_class_body():
    # Upstream's Flux ships a plan; SD3 does not.
    assert class_assigns("diffusers.models.transformers.transformer_flux", "FluxTransformer2DModel", "_tp_plan")
    assert class_assigns("diffusers.models.transformers.transformer_sd3", "SD3Transformer2DModel", "_tp_plan") is False
    assert class_assigns("diffusers.models.transformers.transformer_sd3", "NoSuchClass", "_tp_plan") is None


def test_upstream_behaviour_takes_the_diffusers_fixes_off():
    sd3 = _module("transformer_sd3").SD3Transformer2DModel
    ours = sd3._tp_plan
    with upstream_behaviour("diffusers.tp_plan.SD3Transformer2DModel", "diffusers.repeated_blocks.SD3Transformer2DModel"):
        assert sd3._tp_plan is None and not sd3._repeated_blocks
    assert sd3._tp_plan is ours and sd3._repeated_blocks == ["JointTransformerBlock"]


def test_upstream_classes_keep_upstream_plans():
    flux = _module("transformer_flux").FluxTransformer2DModel
    assert flux._tp_plan is not None and plan_for(flux._tp_plan) is None


def test_gap_exists_without_the_adapter():
    """With HF_NEURON_DISABLE=1 the classes have neither a plan nor repeated blocks: the fixes close a real gap."""
    code = (
        "import diffusers\n"
        "from diffusers import SD3Transformer2DModel as S, WanTransformer3DModel as W\n"
        "assert S._tp_plan is None and W._tp_plan is None, 'upstream now ships plans'\n"
        "assert not S._repeated_blocks, 'upstream now ships _repeated_blocks'\n"
        "try:\n"
        "    S(num_layers=1, attention_head_dim=8, num_attention_heads=2, joint_attention_dim=8,\n"
        "      caption_projection_dim=16, pooled_projection_dim=8, in_channels=4, out_channels=4,\n"
        "      sample_size=8, pos_embed_max_size=8).compile_repeated_blocks()\n"
        "except ValueError as e:\n"
        "    assert '_repeated_blocks' in str(e)\n"
        "else:\n"
        "    raise AssertionError('compile_repeated_blocks did not raise')\n"
        "print('gap-confirmed')\n"
    )
    env = {"HF_NEURON_DISABLE": "1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "gap-confirmed" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("class_name", sorted(REPEATED_BLOCKS))
def test_repeated_blocks_installed(class_name):
    module_name, blocks = REPEATED_BLOCKS[class_name]
    module = _module(module_name)
    assert getattr(module, class_name)._repeated_blocks == list(blocks)
    for block in blocks:  # each name is a class the model module defines or imports
        assert isinstance(getattr(module, block, None), type), block
    assert get_fix(f"diffusers.repeated_blocks.{class_name}").active


@pytest.mark.parametrize("class_name", [c for c in sorted(REPEATED_BLOCKS) if c in TINY])
def test_repeated_blocks_found_in_tiny_model(class_name):
    model = TINY[class_name].build()
    found = {type(m).__name__ for m in model.modules()}
    assert found & set(model._repeated_blocks), (class_name, model._repeated_blocks)


def test_fixes_documented():
    ours = [f for f in all_fixes() if f.library == "diffusers"]
    assert len(ours) >= len(PLANS) + len(REPEATED_BLOCKS) + 2
    for f in ours:
        assert f.gap, f.name
