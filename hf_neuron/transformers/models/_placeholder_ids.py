"""Placeholder token ids zeroed without a boolean-mask write: the mechanism of :mod:`.kimi_k25` and :mod:`.muse_glimmer`.

Kimi-K2.5 and Muse Glimmer embed their text in the multimodal model's forward. Before
the embedding lookup, the image / video (/ audio) placeholder ids, which the text embedding table
may not cover, are replaced by id 0 with a boolean-mask assignment, on every forward, images or not:

    llm_input_ids = input_ids.clone()
    llm_input_ids[multimodal_mask] = 0

A boolean-mask assignment is an ``index_put`` whose indices are the mask's ``nonzero()``: its size
depends on the data, which a static-shape compiler (torch-neuronx) rejects. Generation with a
compiled forward and a compiled training step of these models fail on Neuron (``boolean-mask
aten.index_put needs aten.nonzero``).

The patch computes the same embeddings with the static-shape form of that write,
``input_ids.masked_fill(multimodal_mask, 0)`` (equal ids, element for element), and hands them to
the upstream forward as ``inputs_embeds`` together with ``input_ids``, which the forward still uses
to place image and video features. Only the text embedding step changes; the merge of image
features (``masked_scatter``) is left as upstream writes it (it only runs with images).
"""

from __future__ import annotations

from hf_neuron.patching import fix, wrap
from hf_neuron.patching.sources import module_mentions

#: The upstream statement the patch replaces (in each listed model's forward).
MASKED_WRITE = "llm_input_ids[multimodal_mask] = 0"
_PLACEHOLDERS = ("image_token_id", "video_token_id", "audio_token_id")


def placeholder_mask(config, input_ids):
    """Where ``input_ids`` holds one of ``config``'s multimodal placeholder ids (as upstream's forward)."""
    mask = None
    for name in _PLACEHOLDERS:
        token_id = getattr(config, name, None)
        if token_id is None:
            continue
        hit = input_ids == token_id
        mask = hit if mask is None else mask | hit
    return mask


def _embed_with_static_shapes(original, self, *args, **kwargs):
    # Generation and the causal-LM class pass the inputs by keyword; other calls keep upstream's path.
    input_ids = kwargs.get("input_ids")
    if args or input_ids is None or kwargs.get("inputs_embeds") is not None or input_ids.device.type != "neuron":
        return original(self, *args, **kwargs)
    mask = placeholder_mask(self.config, input_ids)
    if mask is None:
        return original(self, *args, **kwargs)
    # Equal to upstream's ``ids = input_ids.clone(); ids[mask] = 0``, without a data-dependent index.
    kwargs["inputs_embeds"] = self.get_input_embeddings()(input_ids.masked_fill(mask, 0))
    return original(self, *args, **kwargs)


def register_placeholder_fix(fix_name: str, module_name: str, class_name: str) -> str:
    """Declare the fix ``fix_name`` for the model class ``class_name`` of ``module_name`` (see the module
    docstring); returns ``fix_name``."""
    def detect() -> bool:
        mentions = module_mentions(module_name, MASKED_WRITE)
        if mentions is None:
            raise RuntimeError(f"cannot read the source of {module_name}")
        return mentions

    def patch() -> None:
        import importlib

        wrap(fix_name, getattr(importlib.import_module(module_name), class_name), "forward",
             _embed_with_static_shapes)

    patch.__doc__ = (
        f"{class_name}'s forward zeroes the multimodal placeholder ids with a boolean-mask write "
        f"(``{MASKED_WRITE}``), which a static-shape compiler rejects, so its compiled generation and "
        "training fail on Neuron.\n\n"
        "Detected by the statement in the model's source. Patch: on a neuron device the forward gets "
        "its text embeddings computed with ``masked_fill`` (the same ids), as ``inputs_embeds``.")
    fix(fix_name, "transformers", detect, waits_for=module_name)(patch)
    return fix_name


__all__ = ["MASKED_WRITE", "placeholder_mask", "register_placeholder_fix"]
