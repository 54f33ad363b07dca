"""Qwen3-VL's deepstack merge with static shapes: the mechanism of :mod:`.qwen3_vl` and :mod:`.qwen3_vl_moe`.

Qwen3-VL adds features of intermediate vision layers ("deepstack") to the hidden states of the image
tokens after each of the text decoder's first layers:

    hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds

``visual_embeds`` has one row per image token in the step, and the boolean-mask write is an
``index_put`` whose indices are the mask's ``nonzero()``: both sizes depend on the data. A
static-shape compiler (torch-neuronx) rejects the write, so generation from images fails on Neuron,
and even where it compiled, every count of image tokens in a prefill chunk would be another graph.

The patch moves the data-dependent part out of the graph. Before the text decoder runs (outside any
compiled region, as device ops), each layer's rows are scattered into a tensor of the hidden states'
shape, zero where there is no image token. Inside, the merge is ``torch.where(mask, hidden + dense,
hidden)``: the same values, element for element, with shapes set by the step alone.
"""

from __future__ import annotations

import importlib

import torch

from hf_neuron.patching import fix, wrap
from hf_neuron.patching.tracing import traces_whole

MASKS, EMBEDS = "visual_pos_masks", "deepstack_visual_embeds"


def _dense_merge(original_fn, self, hidden_states, visual_pos_masks, visual_embeds):
    if visual_embeds.dim() != hidden_states.dim():
        return original_fn(self, hidden_states, visual_pos_masks, visual_embeds)
    mask = visual_pos_masks.to(hidden_states.device)[..., None]
    dense = visual_embeds.to(hidden_states.device, hidden_states.dtype)
    return torch.where(mask, hidden_states + dense, hidden_states)


def scatter_rows(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``rows`` (one per True of ``mask``) placed at their positions in a zero tensor shaped as
    ``mask`` plus ``rows``' last dimension."""
    rows = rows.to(mask.device)
    return rows.new_zeros((*mask.shape, rows.shape[-1])).masked_scatter(mask[..., None], rows)


#: Set on a text model by its multimodal model's forward: how many layers take deepstack features.
DEEPSTACK_LAYERS = "_hf_neuron_deepstack_layers"


def _note_deepstack_layers(original_fn, self, *args, **kwargs):
    if not torch.compiler.is_compiling():
        self.language_model.__dict__[DEEPSTACK_LAYERS] = len(self.visual.deepstack_visual_indexes)
    return original_fn(self, *args, **kwargs)


def _densify_before_the_decoder(original_fn, self, *args, **kwargs):
    embeds, mask, inputs_embeds = kwargs.get(EMBEDS), kwargs.get(MASKS), kwargs.get("inputs_embeds")
    if torch.compiler.is_compiling() or not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.device.type != "neuron":
        return original_fn(self, *args, **kwargs)
    if mask is None and embeds is None:
        # A step without image tokens gets the same inputs, all zero, so that every prefill chunk and
        # decode step of a generation from images has one graph whatever it holds.
        layers = self.__dict__.get(DEEPSTACK_LAYERS)
        if not layers:
            return original_fn(self, *args, **kwargs)
        mask = torch.zeros(inputs_embeds.shape[:2], dtype=torch.bool, device=inputs_embeds.device)
        kwargs[MASKS], kwargs[EMBEDS] = mask, [torch.zeros_like(inputs_embeds) for _ in range(layers)]
    elif isinstance(embeds, (list, tuple)) and mask is not None and all(e.dim() == 2 for e in embeds):
        kwargs[EMBEDS] = [scatter_rows(e, mask) for e in embeds]
    return original_fn(self, *args, **kwargs)


def register_deepstack_fix(fix_name: str, module_name: str, class_name: str, model_class_name: str) -> str:
    """Declare the fix ``fix_name`` for the text model ``class_name`` of ``module_name``, inside the
    multimodal model ``model_class_name`` (see the module docstring); returns ``fix_name``."""

    def detect() -> bool:
        text_model = getattr(importlib.import_module(module_name), class_name)
        hidden, mask = torch.zeros(1, 4, 8), torch.tensor([[False, True, True, False]])
        merge = text_model._deepstack_process
        return not traces_whole(lambda h, m, e: merge(None, h, m, e), hidden, mask, torch.ones(2, 8))

    def patch() -> None:
        text_model = getattr(importlib.import_module(module_name), class_name)
        wrap(fix_name, text_model, "_deepstack_process", _dense_merge)
        wrap(fix_name, text_model, "__call__", _densify_before_the_decoder)
        wrap(fix_name, getattr(importlib.import_module(module_name), model_class_name), "forward",
             _note_deepstack_layers)

    patch.__doc__ = (
        f"{class_name} merges deepstack features with a boolean-mask write of one row per image token, "
        "which a static-shape compiler rejects, so generation from images fails on Neuron.\n\n"
        "Detected by tracing the merge (``_deepstack_process``) on a tiny mask: it does not trace with static "
        "shapes. Patch: on a neuron device, before the text model runs (outside the graph) each layer's rows "
        "are scattered into a tensor of the hidden states' shape (all zero for a step without image "
        "tokens), and the merge is a ``torch.where`` of static shape (the same values).")
    fix(fix_name, "transformers", detect, waits_for=module_name)(patch)
    return fix_name


__all__ = ["register_deepstack_fix", "scatter_rows"]
