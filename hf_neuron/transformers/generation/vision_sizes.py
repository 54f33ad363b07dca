"""Vision towers that take each image's size (Pixtral's) in one graph per processed size.

Pixtral's vision tower (Mistral 3) takes a batch of images padded to the largest and ``image_sizes``,
each image's real height and width. It cuts each image's patches to its size, builds rotary positions
and a block-diagonal attention mask per image, all in Python loops over ``image_sizes``. Handed as a
tensor, every size read is a value of the data: a graph break each time, 24 vision graphs for three image
sizes on the tiny Mistral 3.

``generate-image-sizes-as-constants``: ``generate``'s compiled image encoder compiles such a tower's
forward alone and hands it ``image_sizes`` as Python integers. The graph is then specialised on the
sizes, with no break: one graph per processed image size (Pixtral's processor snaps an image to
multiples of the patch size under a longest-edge cap, so that is the bucket). The projector and the
split of the features per image run as device ops around it.
"""

from __future__ import annotations

import inspect

import torch

from hf_neuron.patching import fix, get_fix, is_enabled

SIZES_FIX = "generate-image-sizes-as-constants"
PIXTRAL_MODULE = "transformers.models.pixtral.modeling_pixtral"


def sized_tower(base_model):
    """The vision tower of ``base_model`` that takes ``image_sizes`` (a direct sub-module), or None."""
    for module in base_model.children():
        forward = getattr(type(module), "forward", None)
        try:
            parameters = inspect.signature(forward).parameters if forward is not None else {}
        except (TypeError, ValueError):
            continue
        if "image_sizes" in parameters and "pixel_values" in parameters:
            return module
    return None


def constant_sizes(image_sizes) -> list[tuple[int, ...]] | None:
    """``image_sizes`` (a tensor or nested sequence of ``(height, width)``) as tuples of Python integers."""
    if image_sizes is None:
        return None
    values = image_sizes.tolist() if isinstance(image_sizes, torch.Tensor) else image_sizes
    return [tuple(int(v) for v in size) for size in values]


def vision_bucket(pixel_values, image_sizes):
    """What decides a sized tower's graph: the padded pixel values' shape and every image's size."""
    return tuple(pixel_values.shape), tuple(constant_sizes(image_sizes))


def constant_sizes_forward(tower, compiled_forward):
    """A forward for ``tower`` that runs ``compiled_forward`` with ``image_sizes`` as Python integers."""

    def forward(pixel_values, image_sizes=None, **kwargs):
        return compiled_forward(pixel_values, image_sizes=constant_sizes(image_sizes), **kwargs)

    return forward


def active() -> bool:
    """Whether the fix is applied and not switched off in this process."""
    return get_fix(SIZES_FIX).active and is_enabled(SIZES_FIX)


def _tiny_pixtral():
    from transformers import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionModel

    config = PixtralVisionConfig(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=16, patch_size=4, head_dim=8)
    return PixtralVisionModel(config).eval(), torch.zeros(1, 3, 16, 16), torch.tensor([[16, 12]])


def _sizes_tensor_breaks_the_graph() -> bool:
    """Whether a tiny Pixtral vision tower, given its ``image_sizes`` as a tensor, fails to trace as one
    graph; and (what the fix relies on) whether it traces whole given them as Python integers."""
    from hf_neuron.patching.tracing import traces_whole

    tower, pixels, sizes = _tiny_pixtral()
    if traces_whole(tower, pixels, image_sizes=sizes):
        return False
    if not traces_whole(tower, pixels, image_sizes=constant_sizes(sizes)):
        raise RuntimeError("Pixtral's vision tower does not trace whole with its image sizes as integers either")
    return True


@fix(SIZES_FIX, "transformers", _sizes_tensor_breaks_the_graph, waits_for=PIXTRAL_MODULE, modality="image")
def patch_sized_towers() -> None:
    """A vision tower that takes each image's size (Pixtral) breaks its graph at every size it reads.

    ``generate`` hands Pixtral's tower ``image_sizes`` as a tensor; the tower slices each image's
    patches, positions and attention mask by those values in Python loops, so every read is a graph
    break. Detected by tracing a tiny Pixtral vision tower with the sizes as a tensor (breaks) and as
    integers (one graph). Patch: ``generate``'s compiled image encoder
    (``generate-compiled-image-encoder``) compiles such a tower's forward alone and hands it the sizes
    as integers: one graph per processed image size.
    """


__all__ = ["SIZES_FIX", "active", "constant_sizes", "constant_sizes_forward", "sized_tower", "vision_bucket"]
