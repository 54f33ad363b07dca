"""What a fix applies to is declared where it is registered: check and the compatibility page list, for
one model, only the fixes of its architecture, its modality and its layer kinds."""

import pytest
from transformers import AutoConfig

from hf_neuron.patching import fix
from hf_neuron.patching.registry import scratch_registry
from hf_neuron.transformers.fix_scope import fix_scope, fixes_for, model_fixes, registered_fixes


def _names(model_type: str, task: str = "generate", tp: int = 1, **fields) -> set[str]:
    return {f.name for f in fixes_for(AutoConfig.for_model(model_type, **fields), task, tp)}


def _declared(**declaration) -> set[str]:
    return {f.name for f in registered_fixes()
            if all(getattr(f, key) == value for key, value in declaration.items())}


def test_a_text_only_model_lists_no_image_fix_and_a_vision_language_one_lists_them_all():
    image = _declared(modality="image")
    assert len(image) >= 4  # the image encoder, the decoder with images, image sizes, the vision grid, ...
    assert not image & _names("mistral")
    assert image <= _names("llava")


@pytest.mark.parametrize("kind, with_it, without_it", [
    ("sliding_window", ("gemma2", {}), ("llama", {})),
    ("recurrent", ("mamba", {}), ("llama", {})),
])
def test_a_layer_kind_fix_is_listed_for_models_with_those_layers_only(kind, with_it, without_it):
    declared = _declared(layer_kind=kind)
    assert declared
    assert declared <= _names(with_it[0], **with_it[1])
    assert not declared & _names(without_it[0], **without_it[1])


def test_expert_fixes_are_listed_for_a_mixture_of_experts_under_tensor_parallelism():
    experts = _declared(layer_kind="experts")
    assert len(experts) == 3
    assert experts <= _names("qwen3_moe", tp=2)
    assert not experts & _names("qwen3_moe", tp=1)  # the tensor-parallel fixes serve TP only
    assert not experts & _names("qwen3", tp=2)


def test_a_one_architecture_fix_outside_models_declares_its_architecture():
    mimo = {f.name for f in model_fixes("mimo_v2_flash")}
    assert "static-cache-early-init-shapes-measured" in mimo
    entry = next(f for f in registered_fixes() if f.name == "static-cache-early-init-shapes-measured")
    assert fix_scope(entry) == "model" and entry.apply.__module__.endswith("generation.cache_allocation")
    assert "static-cache-early-init-shapes-measured" not in _names("llama")


def test_a_declaration_outside_the_known_kinds_is_refused():
    with scratch_registry(), pytest.raises(ValueError, match="modality must be one of"):
        fix("x", "transformers", lambda: True, modality="audio")(lambda: None)
