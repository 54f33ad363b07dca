"""Static sliding-window cache bookkeeping that compiles once.

Upstream ``StaticSlidingWindowLayer`` keeps a Python int, ``cumulative_length_int``, next to the
tensor ``cumulative_length`` and branches on it inside ``update`` (cache not full / becoming full /
full). Dynamo guards on that int, so a compiled forward recompiles at every decode step until it
hits ``recompile_limit`` and falls back to eager (measured: 64 graphs for 8 prompts on a tiny
Mistral); the three branches also return keys of three different lengths.

Our ``update`` has one branch-free form for every step. The layer's buffer of ``S`` slots (``S =
min(sliding_window, max_cache_len)``, as upstream) always holds the last ``S`` positions in order
(slot ``j`` is position ``past - S + j``; positions below 0 are zeros). A forward of ``q`` tokens
concatenates buffer and new states (``S + q`` keys, positions ``past - S ... past + q - 1``), keeps
the last ``S`` of them as the new buffer, and returns the concatenation rotated left by
``max(S - past, 0)`` so that position ``p`` sits at index ``p - kv_offset`` with ``kv_offset =
max(past - S, 0)``; the rotated-in zeros sit at "future" positions that the causal mask removes.
The shapes depend only on ``q``, the only state is the tensor ``cumulative_length``, and
``get_mask_sizes`` reports ``(S + q, kv_offset)`` so that Transformers' own mask functions
(causal, sliding window, padding) describe exactly these keys. Memory stays ``S`` slots per layer.

Two more fixes keep compiled forwards of sliding-window models in one graph per step:

- ``static-sliding-window-mask-sizes-traced``: Inkling's attention asks the cache for its mask
  sizes (``get_mask_sizes``) to build a learned relative-position bias for the keys it attends to.
  The layout above answers with an int offset read off the length tensor, which is right where masks
  are built (before the compiled forward, in ``prepare_inputs_for_generation``) but data dependent
  inside it (the value is only known when the graph runs). While a graph is traced (Dynamo
  compiling, or fake tensors measuring the first forward's cache states) the offset is returned as
  the 0-d tensor it is computed from; the key positions built from it are the same numbers.
- ``hybrid-sliding-generate-mask``: the masks ``generate`` builds for "hybrid_sliding" layers.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, get_fix, is_enabled, replace, wrap
from hf_neuron.transformers.generation.steps import cache_parameter

FIX_NAME = "static-sliding-window-cache"
MASK_SIZES_FIX = "static-sliding-window-mask-sizes-traced"
HYBRID_SLIDING_FIX = "hybrid-sliding-generate-mask"


def _upstream_tracks_python_int() -> bool:
    from transformers.cache_utils import StaticSlidingWindowLayer

    layer = StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)
    return isinstance(vars(layer).get("cumulative_length_int"), int)


def _update(original, self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
    if not self.is_initialized:
        self.lazy_initialization(key_states, value_states)
    slots = self.max_cache_len
    keys = torch.cat((self.keys, key_states), dim=-2)
    values = torch.cat((self.values, value_states), dim=-2)
    total = keys.shape[-2]
    # Copy (never re-assign) so that the buffers keep their static addresses.
    self.keys.copy_(keys[:, :, -slots:, :])
    self.values.copy_(values[:, :, -slots:, :])
    rotation = (slots - self.cumulative_length).clamp(min=0)
    order = (torch.arange(total, device=keys.device) + rotation) % total
    self.cumulative_length.add_(key_states.shape[-2])
    return keys.index_select(-2, order), values.index_select(-2, order)


def _get_mask_sizes(original, self, query_length: int) -> tuple[int, int]:
    # Called by the mask creation outside the compiled forward (generate builds the masks up front).
    past = int(self.cumulative_length)
    return self.max_cache_len + query_length, max(past - self.max_cache_len, 0)


def _get_seq_length(original, self):
    # A tensor, like StaticLayer, so that a compiled forward asking for it does not guard on an int.
    return self.cumulative_length if self.is_initialized else 0


def _crop(self, tokens_to_remove: int) -> None:
    # Upstream's crop only lowers the length, which fits its layout (slot i = position i); in ours
    # slot j holds position ``past - S + j``, so dropping the newest k positions shifts the buffer
    # right by k. The k slots opening on the left stand for positions below ``past - S``, which are
    # negative (zeros) as long as the layer never held more than S positions: what upstream's
    # ``is_croppable`` (max_cache_len <= sliding_window) guarantees before anyone crops.
    if tokens_to_remove > 0:
        raise RuntimeError(
            "Static layers can only be cropped by passing a negative int, to specify how many tokens to remove"
        )
    removed = min(abs(int(tokens_to_remove)), int(self.cumulative_length)) if self.is_initialized else 0
    if removed == 0:
        return
    shift = min(removed, self.max_cache_len)
    for buffer in (self.keys, self.values):
        buffer.copy_(buffer.roll(shift, dims=-2))
        buffer[:, :, :shift].zero_()
    self.cumulative_length.sub_(removed)


def _get_length_int(self) -> int:
    return int(self.cumulative_length)


def _set_length_int(self, value: int) -> None:
    # Upstream __init__ and reset() assign it; the tensor stays the single source of truth.
    if hasattr(self, "cumulative_length"):
        self.cumulative_length.fill_(int(value))


@fix(FIX_NAME, "transformers", _upstream_tracks_python_int, waits_for="transformers.cache_utils",
     layer_kind="sliding_window")
def patch_static_sliding_window_layer() -> None:
    """Sliding-window static cache layers recompile at every decode step under torch.compile.

    Gap: ``StaticSlidingWindowLayer`` branches on the Python int ``cumulative_length_int`` inside
    ``update``, so Dynamo guards on it and every decode step is a new graph (Mistral, Gemma 2/3,
    GPT-OSS, Qwen2 sliding layers, hybrid models). Detected when a fresh layer stores its length
    as a Python int. Patch: a branch-free ``update`` and matching ``get_mask_sizes`` driven by the
    tensor length only (see the module docstring); the int becomes a view of the tensor, and
    ``crop`` (assisted decoding rolls back rejected draft tokens with it) shifts the buffer to match.
    """
    from transformers.cache_utils import StaticSlidingWindowLayer

    wrap(FIX_NAME, StaticSlidingWindowLayer, "update", _update)
    wrap(FIX_NAME, StaticSlidingWindowLayer, "get_mask_sizes", _get_mask_sizes)
    wrap(FIX_NAME, StaticSlidingWindowLayer, "get_seq_length", _get_seq_length)
    replace(FIX_NAME, StaticSlidingWindowLayer, "crop", _crop)
    replace(FIX_NAME, StaticSlidingWindowLayer, "cumulative_length_int", property(_get_length_int, _set_length_int))


# ----------------------------------------------------------------------------- sliding-window mask sizes


def _sliding_window_layout_active() -> bool:
    return get_fix(FIX_NAME).active and is_enabled(FIX_NAME)


def _mask_sizes_as_tensors_when_traced(original_fn, self, query_length: int, layer_idx: int, *args, **kwargs):
    from torch._subclasses.fake_tensor import is_fake
    from transformers.cache_utils import StaticSlidingWindowLayer

    layers = getattr(self, "layers", ())
    layer = layers[layer_idx] if isinstance(layer_idx, int) and 0 <= layer_idx < len(layers) else None
    length = getattr(layer, "cumulative_length", None)
    if not (isinstance(layer, StaticSlidingWindowLayer) and isinstance(length, torch.Tensor)
            and _sliding_window_layout_active()):
        return original_fn(self, query_length, layer_idx, *args, **kwargs)
    # A fake length (the cache-state measurement) has no value to give on any device; a compiled
    # forward on another device keeps the int answer (and its guard) as without hf_neuron.
    keys = getattr(layer, "keys", None)
    on_neuron = (keys if isinstance(keys, torch.Tensor) else length).device.type == "neuron"
    compiling = torch.compiler.is_compiling()  # first: Dynamo does not trace into is_fake
    if not ((on_neuron and compiling) or (not compiling and is_fake(length))):
        return original_fn(self, query_length, layer_idx, *args, **kwargs)
    # hf_neuron's layout (see hf_neuron.transformers.generation.sliding_window_cache): the S buffered slots then the q new keys,
    # position p at index p - offset with offset = max(past - S, 0); the same numbers, as a tensor.
    slots = layer.max_cache_len
    return slots + query_length, (length - slots).clamp(min=0)


def _mask_sizes_data_dependent_when_traced() -> bool:
    """Whether hf_neuron's sliding-window layout answers ``get_mask_sizes`` from the length's value,
    which a fake length (what a traced graph holds) cannot give.

    Asked of that layout's own function rather than of the installed method: the two fixes are
    decided when the same module finishes importing, in an order this detector cannot rely on. The
    fake length is made from a meta tensor: a fake of a real CPU scalar carries its value (torch
    2.14 keeps it for ``item()``), which a length on the device, as the graph holds it, does not."""
    from torch._subclasses.fake_tensor import DataDependentOutputException as DataDependent
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers.cache_utils import StaticSlidingWindowLayer

    layer = StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)
    with FakeTensorMode() as mode:
        length = mode.from_tensor(torch.empty((), dtype=torch.long, device="meta"))
        try:
            int(length)
        except DataDependent:
            pass
        else:
            raise RuntimeError("a fake length tensor has a value here: the probe cannot tell if the layout reads it")
        layer.cumulative_length = length
        try:
            _get_mask_sizes(None, layer, 1)
        except DataDependent:
            return True
    return False


@fix(MASK_SIZES_FIX, "transformers", _mask_sizes_data_dependent_when_traced, waits_for="transformers.cache_utils",
     layer_kind="sliding_window")
def patch_sliding_window_mask_sizes() -> None:
    """A forward that asks a static sliding-window layer for its mask sizes inside the compiled graph
    (Inkling's relative-position bias) cannot be traced: the offset is read off the length tensor as an int.

    Detected by asking the layer (with hf_neuron's sliding-window layout) for its mask sizes with a fake
    length tensor, as Dynamo and the cache-state measurement see it. Patch: for a layer on a neuron
    device, while a graph is traced, the offset is returned as a 0-d tensor (same value); the int
    form, which masks built before the forward need, is unchanged.
    """
    from transformers.cache_utils import Cache

    # On the cache, not the layer: the sliding-window fix replaces the layer's answer outright, and
    # the order in which the two are applied is not fixed.
    wrap(MASK_SIZES_FIX, Cache, "get_mask_sizes", _mask_sizes_as_tensors_when_traced)


# ----------------------------------------------------------------------------- hybrid sliding masks


def _hybrid_sliding_mask_is_a_sliding_window_mask(original_fn, *args, **kwargs):
    embeds = kwargs.get("inputs_embeds")
    if isinstance(embeds, torch.Tensor) and embeds.device.type == "neuron":
        from transformers.masking_utils import create_sliding_window_causal_mask

        return create_sliding_window_causal_mask(*args, **kwargs)
    return original_fn(*args, **kwargs)


def _hybrid_sliding_mask_ignores_the_window() -> bool:
    """Whether the masks generate builds for a "hybrid_sliding" layer differ from the sliding-window mask."""
    from transformers import PretrainedConfig, StaticCache
    from transformers.masking_utils import create_masks_for_generate, create_sliding_window_causal_mask

    config = PretrainedConfig(num_hidden_layers=2, layer_types=["hybrid_sliding", "hybrid"], sliding_window=2,
                              num_attention_heads=1, num_key_value_heads=1, hidden_size=4, head_dim=4)
    config._attn_implementation = "sdpa"
    cache = StaticCache(config=config, max_cache_len=8)
    cache.early_initialization(batch_size=1, num_heads=1, head_dim=4, dtype=torch.float32, device="cpu")
    kwargs = {"config": config, "inputs_embeds": torch.empty(1, 4, 0), "attention_mask": torch.ones(1, 4, dtype=torch.long),
              cache_parameter(create_masks_for_generate): cache, "position_ids": torch.arange(4)[None]}
    masks = create_masks_for_generate(**kwargs)
    window = create_sliding_window_causal_mask(**kwargs)
    built = masks.get("sliding_attention") if isinstance(masks, dict) else None
    return not (isinstance(built, torch.Tensor) and isinstance(window, torch.Tensor) and built.shape == window.shape
                and torch.equal(built, window))


@fix(HYBRID_SLIDING_FIX, "transformers", _hybrid_sliding_mask_ignores_the_window,
     waits_for="transformers.masking_utils", layer_kind="sliding_window")
def patch_hybrid_sliding_mask() -> None:
    """Generate's masks for "hybrid_sliding" layers (Inkling's sliding-window attention next to a
    short convolution) are plain causal masks, sized for the full-attention layers: a compiled
    chunked prefill fails on the shape mismatch with the sliding layer's keys.

    Gap: ``LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING["hybrid_sliding"]["sliding_attention"]`` is
    ``create_causal_mask`` where the model itself (building its masks from a 2D mask) uses
    ``create_sliding_window_causal_mask``; generate builds the masks itself only for a compileable
    cache, so only compiled generation sees it (Transformers 5.25 closes it: the entry is
    ``create_sliding_window_causal_mask``). Detected by building generate's masks for a tiny
    "hybrid_sliding" config and comparing them with the sliding-window mask. Patch: for inputs on a
    neuron device that entry builds the sliding-window mask.
    """
    from transformers.masking_utils import LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING

    wrap(HYBRID_SLIDING_FIX, LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING["hybrid_sliding"], "sliding_attention",
         _hybrid_sliding_mask_is_a_sliding_window_mask, mapping=True)
