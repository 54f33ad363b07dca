"""Pixtral's vision tower (Mistral 3) on Neuron: one vision graph per processed image size, with the CPU
tokens (the tower gets each image's size as integers instead of a tensor)."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_from_images_counting_graphs
from hf_neuron.tiny_models.vision import random_image, tiny_vision_model, torchvision_available, vision_recipe
from hf_neuron.transformers import import_fix_targets
from hf_neuron.transformers.generation import vision_sizes
from hf_neuron.transformers.generation.vision_sizes import SIZES_FIX, constant_sizes

SIZES = {"max_cache_len": 128, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False}


@pytest.fixture(autouse=True, scope="module")
def fixes_applied():
    import_fix_targets()


def test_constant_sizes_are_tuples_of_python_ints():
    assert constant_sizes(torch.tensor([[48, 32], [16, 64]])) == [(48, 32), (16, 64)]
    assert constant_sizes([[8, 8]]) == [(8, 8)] and constant_sizes(None) is None


@pytest.fixture(scope="module")
def mistral3():
    if not torchvision_available():  # Pixtral's processor is torchvision-backed (its recipe says so)
        pytest.skip("Pixtral's processor needs torchvision, which this environment does not have")
    cpu, processor = tiny_vision_model("mistral3")
    device, _ = tiny_vision_model("mistral3")
    return cpu, device.to("neuron"), processor


def _generate(model, inputs):
    return generate_from_images_counting_graphs(model, inputs, **GREEDY, **SIZES)


def _inputs(processor, size, seed=0):
    prompt = vision_recipe("mistral3").prompt("The quick brown fox")
    return processor(text=[prompt], images=[[random_image(*size, seed=seed)]], return_tensors="pt")


def test_mistral3_compiles_one_vision_graph_per_processed_size_with_the_cpu_tokens(mistral3, fresh_dynamo):
    assert get_fix(SIZES_FIX).active, get_fix(SIZES_FIX).reason
    cpu, device, processor = mistral3
    vision_graphs, text_graphs = [], 0
    # 40x30 and 64x96 are processed to 48x32 and 48x64; the second 40x30 image is the first size again
    for seed, size in enumerate(((40, 30), (64, 96), (40, 30))):
        inputs = _inputs(processor, size, seed)
        with torch.no_grad():
            expected = cpu.generate(**inputs, **GREEDY)
        tokens, text, vision = _generate(device, inputs)
        assert torch.equal(tokens, expected), size
        vision_graphs.append(vision)
        text_graphs += text
    assert vision_graphs == [1, 1, 0] and text_graphs == 2


def test_without_the_fix_pixtrals_tower_breaks_into_many_graphs(mistral3, fresh_dynamo):
    cpu, device, processor = mistral3
    with upstream_behaviour(SIZES_FIX):
        _, _, vision = _generate(device, _inputs(processor, (40, 30)))
    assert vision > 1  # breaks where the tower reads sizes from the tensor (with the fix: 1)


def test_the_detector_sees_the_break():
    assert vision_sizes._sizes_tensor_breaks_the_graph() is True
