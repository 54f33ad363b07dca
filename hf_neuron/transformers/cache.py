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
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, replace, wrap

FIX_NAME = "static-sliding-window-cache"


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


@fix(FIX_NAME, "transformers", _upstream_tracks_python_int, waits_for="transformers.cache_utils")
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
