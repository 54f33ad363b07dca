"""Qwen3-VL and Qwen3-VL-MoE generate from images compiled on Neuron: the deepstack merge with static shapes
gives the CPU tokens in the text decoder's two graphs per batch size."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_from_images_counting_graphs
from hf_neuron.tiny_models.vision import random_image, tiny_vision_model
from hf_neuron.transformers import import_fix_targets
from hf_neuron.transformers.models import qwen3_vl, qwen3_vl_moe
from hf_neuron.transformers.models._deepstack import scatter_rows

SIZES = {"max_cache_len": 128, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False}
#: Text before the image: the first prefill chunk holds no image token, the second does.
PROMPTS = ["The quick brown fox jumps over the lazy dog <|vision_start|><|image_pad|><|vision_end|> and",
           "<|vision_start|><|image_pad|><|vision_end|>The"]


@pytest.fixture(autouse=True, scope="module")
def fixes_applied():
    import_fix_targets()


def test_scatter_rows_places_each_row_at_its_true():
    mask = torch.tensor([[False, True, False], [True, False, True]])
    rows = torch.tensor([[1.0], [2.0], [3.0]])
    assert scatter_rows(rows, mask).squeeze(-1).tolist() == [[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]]


@pytest.mark.parametrize("model_type, fix_name", [("qwen3_vl", qwen3_vl.FIX_NAME),
                                                   ("qwen3_vl_moe", qwen3_vl_moe.FIX_NAME)])
def test_generate_from_images_compiles_two_text_graphs_with_the_cpu_tokens(model_type, fix_name, fresh_dynamo):
    assert get_fix(fix_name).active, get_fix(fix_name).reason
    cpu, processor = tiny_vision_model(model_type)
    device, _ = tiny_vision_model(model_type)
    device.to("neuron")
    processor.tokenizer.padding_side = "left"
    inputs = processor(text=PROMPTS, images=[random_image(40, 30, seed=1), random_image(64, 96, seed=2)],
                       return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = cpu.generate(**inputs, **GREEDY)
    tokens, text, _ = generate_from_images_counting_graphs(device, inputs, **GREEDY, **SIZES)
    assert torch.equal(tokens, expected)
    assert text == 2, "one prefill-chunk graph (with or without image tokens) and one decode graph"

    torch._dynamo.reset()  # the gap: upstream's boolean-mask merge does not compile
    with upstream_behaviour(fix_name), pytest.raises(Exception, match="index_put"):
        device.generate(**{k: v.to("neuron") for k, v in inputs.items()}, **GREEDY, **SIZES)
