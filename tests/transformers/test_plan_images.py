"""``hf-neuron plan`` on a vision-language model: the text graphs plus one vision-tower graph per batch size
and processed image size, the tower's weights counted, and a clear error for image sizes on a text model."""

from __future__ import annotations

import pytest

from hf_neuron.tiny_models.vision import IMAGE_SIZE, save_tiny_vision_model
from hf_neuron.transformers.plan import PlanError, plan_generation


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return save_tiny_vision_model("llava", tmp_path_factory.mktemp("llava"))


def test_vision_graphs_per_batch_size_and_image_size(llava_dir):
    plan = plan_generation(llava_dir, [1, 2], max_cache_len=128, prefill_chunk_size=16)
    vision = [(g.batch_size, g.image_size, g.count) for g in plan.graphs if g.kind == "vision"]
    assert vision == [(1, (IMAGE_SIZE, IMAGE_SIZE), 1), (2, (IMAGE_SIZE, IMAGE_SIZE), 1)]
    assert plan.graph_count == 2 * 2 + 2  # the text graphs, then the vision tower's
    assert "pixel_values [2, 3, 32, 32]" in plan.render()
    sized = plan_generation(llava_dir, [1], max_cache_len=128, prefill_chunk_size=16, image_sizes=[(32, 32), (64, 64)])
    assert [g.image_size for g in sized.graphs if g.kind == "vision"] == [(32, 32), (64, 64)]


def test_the_vision_tower_weights_are_counted(llava_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(llava_dir)
    plan = plan_generation(llava_dir, [1], max_cache_len=128, prefill_chunk_size=16)
    assert plan.memory.weights == sum(t.numel() * t.element_size()
                                      for t in list(model.parameters()) + list(model.buffers()))


def test_image_sizes_for_a_text_model_are_refused(tiny_llama_dir):
    with pytest.raises(PlanError, match="takes no images"):
        plan_generation(tiny_llama_dir, [1], max_cache_len=64, image_sizes=[(32, 32)])


def test_a_grid_tower_is_planned_per_bucket_of_patch_counts(tmp_path):
    qwen = save_tiny_vision_model("qwen2_vl", tmp_path / "qwen2_vl")
    # 8x8-pixel patches merged 2x2: 16, 48 and 60 patches, the last two in the bucket of 64 (16 merged tokens).
    plan = plan_generation(qwen, [1, 2], max_cache_len=128, prefill_chunk_size=16,
                           image_sizes=[(32, 32), (32, 96), (48, 80)])
    vision = [(g.batch_size, g.tokens, g.bucket_of) for g in plan.graphs if g.kind == "vision"]
    assert vision == [(1, 24, ((32, 32),)), (1, 64, ((32, 96), (48, 80))),
                      (2, 48, ((32, 32),)), (2, 128, ((32, 96), (48, 80)))]
    assert "patches [64] (batch 1 of 32x96, 48x80)" in plan.render()
    assert any("bucket of patch counts" in note for note in plan.vision_notes)
