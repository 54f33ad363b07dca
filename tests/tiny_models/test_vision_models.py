"""Tiny image-text-to-text checkpoints: model and processor agree, load offline, and bad types say what to do."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.tiny_models import TinyModelError
from hf_neuron.tiny_models.vision import (
    IMAGE_SIZE,
    float32_pixels,
    random_image,
    save_tiny_vision_model,
    tiny_vision_model,
    torchvision_available,
    vision_model_types,
    vision_recipe,
)


@pytest.mark.parametrize("model_type", vision_model_types())
def test_a_saved_checkpoint_loads_offline_and_its_processor_matches_the_tower(model_type, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if vision_recipe(model_type).needs_torchvision and not torchvision_available():
        with pytest.raises(TinyModelError, match="needs torchvision"):
            save_tiny_vision_model(model_type, tmp_path / model_type)
        assert not (tmp_path / model_type).exists()
        return

    out = save_tiny_vision_model(model_type, tmp_path / model_type)
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out)
    inputs = float32_pixels(processor(text=[vision_recipe(model_type).prompt("Hello")],
                                      images=[[random_image(50, 70)]], return_tensors="pt"))
    inputs.pop("labels", None)
    if model_type in ("llava", "gemma3", "paligemma"):  # fixed-size processors: every image one shape
        assert inputs["pixel_values"].shape[-2:] == (IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad():
        logits = model(**inputs).logits  # upstream checks that placeholders and features agree
    if model.config.is_encoder_decoder:  # Florence-2: the logits are the decoder's (one start token)
        assert logits.shape[0] == inputs["input_ids"].shape[0]
    else:
        assert logits.shape[:2] == inputs["input_ids"].shape
    same, _ = tiny_vision_model(model_type)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))


def test_types_without_a_recipe_get_a_clear_error(tmp_path):
    with pytest.raises(TinyModelError, match="no tiny image-text-to-text recipe for 'gemma3n': .*timm"):
        save_tiny_vision_model("gemma3n", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(TinyModelError, match="not an image-text-to-text model_type"):
        tiny_vision_model("llama")


def test_reserved_ids_take_the_processors_placeholder_names():
    from hf_neuron.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(named={5: "<image>"})
    assert len(tokenizer) == len(build_tokenizer())
    assert tokenizer("a<image>b").input_ids[1] == 5
    with pytest.raises(ValueError, match="not a reserved id"):
        build_tokenizer(named={2: "<image>"})
