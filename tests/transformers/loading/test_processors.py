"""Without torchvision, a processor with a video processor (Qwen3-VL's, Qwen-Image-2.1's text stack) builds,
saves and loads on a neuron host, prompts tokenize as upstream, and a video gives a clear error."""

from __future__ import annotations

import json

import pytest
import torch

from transformers.utils import is_torchvision_available

from hf_neuron.patching import upstream_behaviour
from hf_neuron.testing.tiny_pipelines import _EXTRA_TOKENS, _tokenizer, build_qwen3vl_processor
from hf_neuron.transformers.loading.processors import FIX

if is_torchvision_available():
    pytest.skip("torchvision is installed: the gap this fix fills does not exist here", allow_module_level=True)


def _processor():
    return build_qwen3vl_processor(_tokenizer(_EXTRA_TOKENS))


def test_upstream_cannot_build_the_processor_without_torchvision():
    with upstream_behaviour(FIX), pytest.raises((AttributeError, ValueError, TypeError)):
        _processor()


def test_processor_saves_and_loads_with_the_checkpoint_class_name(tmp_path):
    from transformers import Qwen3VLProcessor

    processor = _processor()
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text())["video_processor"]
    assert saved["video_processor_type"] == "Qwen3VLVideoProcessor"  # a host with torchvision loads the real one
    assert "_upstream_type" not in saved

    loaded = Qwen3VLProcessor.from_pretrained(tmp_path)
    assert loaded.video_processor.merge_size == 2
    text = ["a small red fox in the snow"]
    assert torch.equal(loaded(text=text, return_tensors="pt").input_ids, processor(text=text, return_tensors="pt").input_ids)
    with upstream_behaviour(FIX), pytest.raises(ImportError, match="requires the Torchvision library"):
        Qwen3VLProcessor.from_pretrained(tmp_path)


def test_a_video_input_says_torchvision_is_needed():
    with pytest.raises(ImportError, match="video inputs need torchvision"):
        _processor()(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[torch.zeros(2, 3, 32, 32)])
