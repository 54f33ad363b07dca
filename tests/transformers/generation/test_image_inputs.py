"""Generation from prompts with an image on Neuron: the CPU tokens, the text decoder's two graphs per batch
size, and the vision tower compiled once per processed image size (the processor's resize is the bucket)."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import upstream_behaviour
from hf_neuron.testing.generation_workload import generate_from_images_counting_graphs
from hf_neuron.tiny_models.vision import random_image, tiny_vision_model
from hf_neuron.transformers.generation.image_inputs import DECODER_FIX, ENCODER_FIX

SIZES = {"max_cache_len": 96, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False}
PROMPTS = {1: ["<image>The quick brown fox jumps over"],
           2: ["<image>The", "<image>The quick brown fox jumps over the lazy dog again"]}
#: Two image sizes the processor resizes to the same 32x32 input.
IMAGES = (random_image(40, 30, seed=1), random_image(64, 96, seed=2))


@pytest.fixture(scope="module")
def llava():
    cpu, processor = tiny_vision_model("llava")
    device, _ = tiny_vision_model("llava")
    return cpu, device.to("neuron"), processor


def _inputs(processor, batch, image):
    return processor(text=PROMPTS[batch], images=[image] * batch, return_tensors="pt", padding=True)


def _generate(model, inputs):
    return generate_from_images_counting_graphs(model, inputs, **GREEDY, **SIZES)


def test_image_prompts_compile_the_text_graphs_once_per_batch_size_with_the_cpu_tokens(llava, fresh_dynamo):
    cpu, device, processor = llava
    for batch in (1, 2):
        text_graphs, vision_graphs = 0, []
        for image in IMAGES:
            inputs = _inputs(processor, batch, image)
            assert inputs["pixel_values"].shape[-2:] == (32, 32)  # the processor's resize: one bucket
            with torch.no_grad():
                expected = cpu.generate(**inputs, **GREEDY)
            tokens, text, vision = _generate(device, inputs)
            assert torch.equal(tokens, expected)
            text_graphs += text
            vision_graphs.append(vision)
        assert text_graphs == 2, "one prefill-chunk graph and one decode graph per batch size"
        # One vision-tower graph, at the first image size only.
        assert vision_graphs == [1, 0]


def test_without_the_decoder_fix_a_chunk_of_image_tokens_is_another_graph(llava, fresh_dynamo):
    cpu, device, processor = llava
    inputs = _inputs(processor, 2, IMAGES[0])
    with upstream_behaviour(DECODER_FIX):
        tokens, text, _ = _generate(device, inputs)
    assert text > 2  # the chunk holding the image's features and the chunks without are different graphs


def test_without_the_encoder_fix_the_vision_tower_runs_uncompiled(llava, fresh_dynamo):
    cpu, device, processor = llava
    inputs = _inputs(processor, 1, IMAGES[0])
    with torch.no_grad():
        expected = cpu.generate(**inputs, **GREEDY)
    with upstream_behaviour(ENCODER_FIX):
        tokens, text, vision = _generate(device, inputs)
    assert torch.equal(tokens, expected)
    assert vision == 0 and text == 2


def test_a_prompt_near_the_end_of_the_cache_keeps_its_image_features(llava, fresh_dynamo):
    # The image's 16 tokens sit at positions 9-24 of 33, and 33 + 8 new tokens fill a cache of 41: the
    # prompt cannot be padded to 48, so the last chunk overlaps the previous one (positions 17-32). Run as a
    # second prefill call, upstream would number the image rows it holds from 0 again.
    cpu, device, processor = llava
    inputs = processor(text=["The quick brown fox<image> jumps over"], images=[[IMAGES[0]]], return_tensors="pt")
    image_positions = (inputs["input_ids"][0] == cpu.config.image_token_index).nonzero().flatten().tolist()
    assert inputs["input_ids"].shape[1] == 33 and image_positions == list(range(9, 25))
    greedy = {**GREEDY, "max_new_tokens": 8, "min_new_tokens": 8}
    with torch.no_grad():
        expected = cpu.generate(**inputs, **greedy)
        out = device.generate(**{k: v.to("neuron") for k, v in inputs.items()}, **greedy, max_cache_len=41,
                              prefill_chunk_size=16)
    assert torch.equal(out.cpu(), expected)


def test_a_features_function_that_breaks_runs_around_its_tower_compiled_alone(fresh_dynamo):
    # Idefics3 drops padding tiles with a boolean mask before its tower: compiled whole, a graph break.
    cpu, processor = tiny_vision_model("idefics3")
    device, _ = tiny_vision_model("idefics3")
    device.to("neuron")
    vision_graphs = []
    for seed, size in enumerate(((64, 96), (48, 48))):  # 4 tiles and a global view each: one bucket
        inputs = processor(text=["<image>The quick brown fox"], images=[[random_image(*size, seed=seed)]],
                           return_tensors="pt")
        with torch.no_grad():
            expected = cpu.generate(**inputs, **GREEDY)
        tokens, text, vision = _generate(device, inputs)
        assert torch.equal(tokens, expected)
        vision_graphs.append(vision)
    assert vision_graphs == [1, 0]
    assert device.model.vision_model.__dict__.get("_hf_neuron_compiled_alone") is not None
