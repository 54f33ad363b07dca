"""Dynamic-resolution vision towers (Qwen-VL) on Neuron: one vision graph per bucket of patch counts,
with the features and tokens of the unpadded images."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_from_images_counting_graphs
from hf_neuron.tiny_models.vision import random_image, tiny_vision_model
from hf_neuron.transformers import import_fix_targets
from hf_neuron.transformers.generation import vision_grid
from hf_neuron.transformers.generation.vision_grid import (
    GRID_FIX,
    bucket_patches,
    padded_grid,
    record_precomputed,
    static_lengths,
    static_varlen_attention,
)

SIZES = {"max_cache_len": 128, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False}
PROMPT = "<|vision_start|><|image_pad|><|vision_end|>The quick brown fox"
#: 16, 48 and 60 patches (merged 2x2): buckets of 24, 64 and 64 patches (6, 16 and 16 merged tokens).
IMAGE_SIZES = ((40, 30), (64, 96), (48, 80))


@pytest.fixture(autouse=True, scope="module")
def fixes_applied():
    import_fix_targets()


def test_buckets_are_two_and_three_times_powers_of_two_of_merged_tokens():
    # patches 1-4 (one merged token of 4) pad to 2 tokens, 5-8 to 3, 9-12 to 4, 13-20 to 6...
    assert [bucket_patches(n, 4) // 4 for n in range(4, 4 * 17, 4)] == [2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12,
                                                                        16, 16, 16, 16, 24]
    assert bucket_patches(16, 4) == 24 and bucket_patches(17, 4) == 24  # always one merged token of padding
    for merged in range(3, 5000):
        assert merged + 1 <= bucket_patches(merged, 1) <= (merged + 1) * 1.5  # at most a third of a call pads
    with pytest.raises(ValueError, match="positive"):
        bucket_patches(0, 4)


def test_the_padding_is_one_more_image_and_boundaries_get_a_length_set_by_the_bucket():
    patches, grid = torch.ones(20, 3), torch.tensor([[1, 2, 6], [1, 2, 4]])
    padded, padded_grid_thw = padded_grid(patches, grid, 24, (2, 2))
    assert padded.shape == (24, 3) and padded[20:].abs().sum() == 0
    assert padded_grid_thw.tolist() == [[1, 2, 6], [1, 2, 4], [1, 2, 2]]
    static = static_lengths({"cu_seqlens": torch.tensor([0, 12, 20, 24], dtype=torch.int32), "max_seqlen": 12,
                             "position_ids": torch.zeros(24, 2)}, 24, 4)
    assert static["cu_seqlens"].tolist() == [0, 12, 20, 24] + [24] * 4 and static["max_seqlen"] == 24
    assert static["position_ids"].shape == (24, 2)


def _per_segment_attention(q, k, v, cu):
    outputs = [torch.nn.functional.scaled_dot_product_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b])
               for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
    return torch.cat(outputs, dim=2).transpose(1, 2)


def test_static_varlen_attention_equals_attention_per_segment():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    module = torch.nn.Module().eval()
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    expected = _per_segment_attention(q[:, :, :12], k[:, :, :12], v[:, :, :12], cu)
    # Padded to 16 tokens: the padding is one more segment, and boundaries repeated at the end are empty.
    padded_cu = torch.tensor([0, 5, 12, 16, 16, 16], dtype=torch.int32)
    output, _ = static_varlen_attention(module, q, k, v, None, scaling=8 ** -0.5, cu_seq_lens_q=padded_cu,
                                        cu_seq_lens_k=padded_cu)
    assert output.shape == (1, 16, 2, 8)
    torch.testing.assert_close(output[:, :12], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_a_padded_tower_gives_the_unpadded_features(model_type):
    """Positions, segments, window order and position-embedding interpolation of the padded grid: the real
    rows of every output equal upstream's forward on the unpadded patches (on CPU, uncompiled)."""
    model, processor = tiny_vision_model(model_type)
    tower = model.model.visual
    inputs = processor(text=[PROMPT, PROMPT], images=[random_image(48, 48, seed=1), random_image(40, 30, seed=2)],
                       return_tensors="pt", padding=True)
    patches, grid = inputs["pixel_values"], inputs["image_grid_thw"]
    with torch.no_grad():
        expected = tower(patches, grid_thw=grid)
    vision_grid.record_helpers_of(tower)
    unit = vision_grid.merge_unit(tower)
    count = patches.shape[0]
    bucket = bucket_patches(count, unit)
    assert (count, bucket) == (52, 64)  # 36 + 16 patches: 13 merged tokens, padded to 16
    padded, padded_grid_thw = padded_grid(patches, grid, bucket, vision_grid.merge_shape(tower))
    with vision_grid._StaticVarlenAttention(tower):
        precomputed = static_lengths(record_precomputed(tower, padded, padded_grid_thw), bucket, unit)
        assert {"position_ids", "cu_seqlens"} <= set(precomputed)
        with torch.no_grad():
            outputs = type(tower).forward(tower, padded, padded_grid_thw, **precomputed)
    outputs = vision_grid.cut_outputs(outputs, bucket, count, unit)
    assert set(outputs.keys()) == set(expected.keys())
    for key in expected.keys():
        for got, want in zip(*(v if isinstance(v, (list, tuple)) else [v] for v in (outputs[key], expected[key]))):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def qwen2_vl():
    cpu, processor = tiny_vision_model("qwen2_vl")
    device, _ = tiny_vision_model("qwen2_vl")
    return cpu, device.to("neuron"), processor


def _generate(model, inputs):
    return generate_from_images_counting_graphs(model, inputs, **GREEDY, **SIZES)


def test_qwen2_vl_compiles_one_vision_graph_per_bucket_with_the_cpu_tokens(qwen2_vl, fresh_dynamo):
    assert get_fix(GRID_FIX).active, get_fix(GRID_FIX).reason
    cpu, device, processor = qwen2_vl
    for batch in (1, 2):
        text_graphs, vision_graphs, shapes = 0, [], []
        for index, size in enumerate(IMAGE_SIZES):
            images = [random_image(*size, seed=index + b) for b in range(batch)]
            inputs = processor(text=[PROMPT] * batch, images=images, return_tensors="pt", padding=True)
            shapes.append(inputs["pixel_values"].shape[0])
            with torch.no_grad():
                expected = cpu.generate(**inputs, **GREEDY)
            tokens, text, vision = _generate(device, inputs)
            assert torch.equal(tokens, expected), size
            text_graphs += text
            vision_graphs.append(vision)
        assert len(set(shapes)) == 3  # three processed sizes...
        assert vision_graphs == [1, 1, 0], "...in two buckets: the third image pads to the second's bucket"
        assert text_graphs == 2


def test_without_the_fix_a_qwen2_vl_tower_breaks_into_many_graphs(qwen2_vl, fresh_dynamo):
    cpu, device, processor = qwen2_vl
    inputs = processor(text=[PROMPT], images=[random_image(40, 30)], return_tensors="pt")
    with upstream_behaviour(GRID_FIX):
        _, _, vision = _generate(device, inputs)
    assert vision > 3  # a graph between every grid helper and per-image attention split


def test_the_detector_sees_the_grid_helpers_break_the_graph():
    assert vision_grid._grid_helpers_break_the_graph() is True
