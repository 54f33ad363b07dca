"""Dynamic-resolution vision towers in one graph per patch-count bucket.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, GLM-4V and others resize an image to any multiple of the
patch size within a pixel budget and hand their vision tower the flattened patches with the image's
grid (``grid_thw``: frames, rows, columns of patches). The tower's forward first derives tensors from
the grid with Python loops and ``.tolist()`` (rotary position ids, attention segment boundaries,
window order, position-embedding interpolation), and its non-flash attention splits the patches per
image with ``.tolist()``. Compiled, that is a graph break per derived tensor and per layer, and each
image size a new set of graphs: 24 to 33 graphs for two image sizes at batch 1 on the tiny models.

Transformers already lets a caller pass the derived tensors precomputed: every helper of
``transformers.vision_utils`` (and ``get_max_seqlen``) pops its result from the forward's ``kwargs``
when present. ``generate-vision-grid-static-graph`` builds on that:

1. **Precompute outside the graph.** The tower's forward runs eagerly up to its first sub-module call,
   with the helpers recording what they compute and under which keyword they would have taken it.
2. **Attention without a per-image split.** During the call the tower uses ``STATIC_VARLEN``, a
   registered attention function that reads the segment boundaries (``cu_seqlens``) like flash
   attention's variable-length path and computes them as a block-diagonal mask of static shape.
3. **Pad to a bucket.** The patches of a call get one more image of zeros that fills them up to a
   bucket of patch counts (:func:`bucket_patches`: at least one merged token of padding, rounded up to
   1, 2, 3, 4, 6, 8, 12, 16, 24... merged tokens, the steps of 2 and 3 times powers of two, so about a
   third of a call at most is padding). The grid gets that image too, so every tensor the tower derives
   treats the padding as an image of its own (its own attention segment and windows): it never mixes
   with the real patches, and the outputs are cut back to the real rows, the features of the unpadded
   images. Segment boundaries are extended with empty segments to a length the bucket sets, so every
   tensor the graph takes has a shape set by the bucket alone, whatever the images' sizes and aspect
   ratios.
4. **Compile the tower's forward** with generation's compile config: one graph per bucket (and number
   of images in the call).
"""

from __future__ import annotations

import inspect
import logging
import threading

import torch

from hf_neuron.patching import fix, wrap

logger = logging.getLogger(__name__)

GRID_FIX = "generate-vision-grid-static-graph"
#: The attention implementation the tower uses inside its compiled forward (a name with "flash" in it is
#: what makes Transformers' vision attention pass segment boundaries instead of splitting per image).
STATIC_VARLEN = "hf_neuron_flash_varlen_static"
_HELPER_MODULES = ("transformers.vision_utils", "transformers.utils.generic")
#: Multipliers of a power of two that make the buckets (in merged tokens): 1, 2, 3, 4, 6, 8, 12, 16...
_BUCKET_STEPS = (2, 3)

#: This thread's recording of the grid helpers: ``recording`` (a dict while a tower's helpers are
#: recorded, else absent) and ``depth`` (helpers calling helpers record once, at the outermost call).
_local = threading.local()


class PrecomputeUnavailable(Exception):
    """The tower derives something from the grid that cannot be passed precomputed (or padded)."""


# ----------------------------------------------------------------------------- buckets


def bucket_patches(patches: int, unit: int) -> int:
    """The bucket of a call of ``patches`` patches, in patches: the patches plus at least one merged token of
    padding (``unit`` patches, spatial_merge_size squared), rounded up to ``unit`` times the next of 1, 2, 3,
    4, 6, 8, 12, 16, 24... (2 and 3 times powers of two)."""
    if patches <= 0 or unit <= 0:
        raise ValueError(f"patches and unit must be positive, got {patches} and {unit}")
    merged = -(-patches // unit) + 1
    if merged <= 2:
        return merged * unit
    power = 1
    while True:
        for step in _BUCKET_STEPS:
            if step * power >= merged:
                return step * power * unit
        power *= 2


def merge_shape(tower) -> tuple[int, int]:
    """How many rows and columns of patches a tower merges into one token (``spatial_merge_size``, or
    ``merge_kernel_size``); ``(1, 1)`` without merging."""
    config = getattr(tower, "config", None)
    size = (getattr(tower, "spatial_merge_size", None) or getattr(config, "spatial_merge_size", None)
            or getattr(config, "merge_size", None))
    if size:
        return int(size), int(size)
    kernel = getattr(config, "merge_kernel_size", None)
    if isinstance(kernel, (list, tuple)) and len(kernel) == 2:
        return int(kernel[0]), int(kernel[1])
    return (int(kernel), int(kernel)) if kernel else (1, 1)


def merge_unit(tower) -> int:
    """How many patches a tower merges into one token."""
    rows, columns = merge_shape(tower)
    return rows * columns


def grid_tower(base_model):
    """The vision tower of ``base_model`` that takes a ``grid_thw`` (a direct sub-module), or None."""
    for module in base_model.children():
        forward = getattr(type(module), "forward", None)
        if forward is None:
            continue
        try:
            parameters = inspect.signature(forward).parameters
        except (TypeError, ValueError):
            continue
        if "grid_thw" in parameters:
            return module
    return None


def vision_bucket(model, pixel_values, image_grid_thw) -> tuple:
    """What decides the graph of a grid tower's call: the bucket of its patch count, and its image count."""
    unit = merge_unit(grid_tower(model.base_model))
    return "patches", bucket_patches(int(pixel_values.shape[0]), unit), int(image_grid_thw.shape[0])


# ----------------------------------------------------------------------------- recording the helpers


class _PopProbe(dict):
    """The caller's kwargs as a helper sees them: records which keys it pops."""

    def __init__(self, source):
        super().__init__(source)
        self.popped: list[str] = []

    def pop(self, key, *default):
        if key not in self.popped:
            self.popped.append(key)
        return super().pop(key, *default)


def _recorded_helper(original_fn, *args, **kwargs):
    if torch.compiler.is_compiling():  # inside the graph the helpers only hand back what was precomputed
        return original_fn(*args, **kwargs)
    recording = getattr(_local, "recording", None)
    depth = getattr(_local, "depth", 0)
    if recording is None or depth:
        return original_fn(*args, **kwargs)
    caller = kwargs.get("kwargs")
    if caller is None:
        recording.setdefault("_unavailable", []).append(original_fn.__name__)
        return original_fn(*args, **kwargs)
    probe = _PopProbe(caller)
    kwargs["kwargs"] = probe
    _local.depth = depth + 1
    try:
        result = original_fn(*args, **kwargs)
    finally:
        _local.depth = depth
    names = [name for name in probe.popped if name not in caller]
    for name in probe.popped:
        caller.pop(name, None)
    if len(names) == 1:
        recording[names[0]] = result
    elif names and isinstance(result, tuple) and len(result) == len(names):
        recording.update(zip(names, result))
    elif names:
        recording.setdefault("_unavailable", []).append(original_fn.__name__)
    return result


class _Stop(Exception):
    """Raised at the tower's first sub-module call while its helpers are recorded: the rest is not needed."""


def _stop_at_first_module(module, args):
    if getattr(_local, "recording", None) is not None:
        raise _Stop


def record_precomputed(tower, patches, grid_thw, **kwargs) -> dict:
    """Run ``tower``'s forward eagerly up to its first sub-module call and return what its grid helpers
    computed, keyed by the keyword each takes precomputed (:func:`record_helpers_of` first)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    recording: dict = {}
    handle = register_module_forward_pre_hook(_stop_at_first_module)
    _local.recording = recording
    try:
        with torch.no_grad():
            type(tower).forward(tower, patches, grid_thw, **kwargs)
    except _Stop:
        pass
    finally:
        _local.recording = None
        handle.remove()
    unavailable = recording.pop("_unavailable", None)
    if unavailable:
        raise PrecomputeUnavailable(f"{', '.join(unavailable)} cannot take its result precomputed")
    return recording


# ----------------------------------------------------------------------------- padding to the bucket


def padded_grid(hidden_states: torch.Tensor, grid_thw: torch.Tensor, bucket: int, merge: tuple[int, int]):
    """``(hidden_states, grid_thw)`` with one more image of zeros that fills the call to ``bucket`` patches:
    one frame, ``merge[0]`` rows and as many columns as the padding needs. Every derived tensor (positions,
    attention segments, windows) then treats the padding as an image of its own."""
    pad = bucket - hidden_states.shape[0]
    rows = merge[0]
    if pad <= 0 or pad % (rows * merge[1]):
        raise ValueError(f"cannot pad {hidden_states.shape[0]} patches to {bucket} in merged tokens of {merge}")
    filler = hidden_states.new_zeros((pad, *hidden_states.shape[1:]))
    image = torch.tensor([[1, rows, pad // rows]], dtype=grid_thw.dtype, device=grid_thw.device)
    return torch.cat([hidden_states, filler]), torch.cat([grid_thw, image])


def static_lengths(precomputed: dict, bucket: int, unit: int) -> dict:
    """``precomputed`` with the shapes of one bucket: segment boundaries (``cu_*``) extended to one entry per
    merged token plus two by repeating their end (empty segments), and maximum segment lengths
    (``max_*``) set to the bucket. Every other precomputed tensor has a row per patch (or merged token)
    already."""
    length = bucket // unit + 2
    static = {}
    for name, value in precomputed.items():
        if name.startswith("cu_") and isinstance(value, torch.Tensor) and value.dim() == 1:
            if value.shape[0] > length:
                raise PrecomputeUnavailable(f"{name} has more than {length} entries for {bucket} patches")
            tail = value[-1:].expand(length - value.shape[0])
            static[name] = torch.cat([value, tail])
        elif name.startswith("max_"):
            static[name] = None if value is None else bucket
        else:
            static[name] = value
    return static


def _cut(value, bucket: int, patches: int, unit: int):
    if isinstance(value, torch.Tensor) and value.dim() and bucket != patches:
        if value.shape[0] == bucket:
            return value[:patches]
        if unit > 1 and value.shape[0] == bucket // unit:
            return value[: patches // unit]
        return value
    if isinstance(value, (list, tuple)):
        cut = [_cut(v, bucket, patches, unit) for v in value]
        return type(value)(cut) if isinstance(value, tuple) and not hasattr(value, "_fields") else cut
    return value


def cut_outputs(outputs, bucket: int, patches: int, unit: int):
    """The tower's outputs without the padding rows (per patch, or per merged token)."""
    for key in list(outputs.keys()):
        outputs[key] = _cut(outputs[key], bucket, patches, unit)
    return outputs


# ----------------------------------------------------------------------------- attention


def static_varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                            cu_seq_lens_q=None, cu_seq_lens_k=None, is_causal=False, **kwargs):
    """Attention within the segments ``cu_seq_lens_q`` bounds, as one masked attention of static shape.

    Takes what Transformers hands a flash attention's variable-length path (queries of shape
    ``(1, heads, tokens, head_dim)`` and cumulative segment boundaries) and returns its layout,
    ``(1, tokens, heads, head_dim)``. Boundaries repeated at the end are empty segments."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, is_causal=is_causal, **kwargs)
    tokens = query.shape[2]
    positions = torch.arange(tokens, device=query.device)
    segment = (positions[:, None] >= cu_seq_lens_q[None, 1:].to(positions.dtype)).sum(-1)
    mask = (segment[:, None] == segment[None, :])[None, None]
    if key.shape[1] != query.shape[1]:
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout if module.training else 0.0, scale=scaling)
    return output.transpose(1, 2).contiguous(), None


def register_static_varlen() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(STATIC_VARLEN, static_varlen_attention)


class _StaticVarlenAttention:
    """The tower's config uses :data:`STATIC_VARLEN` while the block runs (a user's flash choice is kept)."""

    def __init__(self, tower):
        self.config = tower.config
        self.previous = None

    def __enter__(self):
        self.previous = self.config._attn_implementation
        if self.previous in (None, "eager", "sdpa"):  # STATIC_VARLEN is registered when the fix applies
            self.config._attn_implementation = STATIC_VARLEN
        return self

    def __exit__(self, *exc):
        if self.previous in (None, "eager", "sdpa"):
            self.config._attn_implementation = self.previous
        return False


# ----------------------------------------------------------------------------- the compiled forward


_warned: set[str] = set()


def _warn_once(tower_name: str, error: Exception) -> None:
    if tower_name not in _warned:
        _warned.add(tower_name)
        logger.warning("hf_neuron: %s cannot run in one graph per bucket of patch counts (%s): it compiles more "
                       "graphs, one set per image size", tower_name, error)


#: Set on a tower whose forward refused the padding image (the error), which then runs unpadded.
_PADDING_REFUSED = "_hf_neuron_padding_refused"


def static_grid_forward(tower, compiled_forward):
    """A forward for ``tower`` that runs ``compiled_forward`` on inputs padded to a bucket, with what the
    tower derives from the grid precomputed."""
    parameters = [p for p in inspect.signature(type(tower).forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    first = parameters[1].name  # after self: the patches ("hidden_states" or "pixel_values")
    record_helpers_of(tower)

    def run(patches, grid_thw, bucket, kwargs):
        try:
            recorded = record_precomputed(tower, patches, grid_thw, **kwargs)
            precomputed = static_lengths(recorded, bucket, merge_unit(tower))
        except PrecomputeUnavailable as e:
            _warn_once(type(tower).__name__, e)
            precomputed = {}
        return compiled_forward(**{first: patches, "grid_thw": grid_thw}, **kwargs, **precomputed)

    def forward(*args, **kwargs):
        kwargs.update(zip((first, "grid_thw"), args))
        patches, grid_thw = kwargs.pop(first, None), kwargs.pop("grid_thw", None)
        if patches is None or grid_thw is None or any(n.startswith("cu_") or n == "position_ids" for n in kwargs):
            return compiled_forward(**{first: patches, "grid_thw": grid_thw}, **kwargs)  # precomputed by the caller
        count, unit = int(patches.shape[0]), merge_unit(tower)
        with _StaticVarlenAttention(tower):
            if tower.__dict__.get(_PADDING_REFUSED) is None:
                bucket = bucket_patches(count, unit)
                try:
                    outputs = run(*padded_grid(patches, grid_thw, bucket, merge_shape(tower)), bucket, kwargs)
                except Exception as e:  # noqa: BLE001 - a constraint of the tower's on image shapes
                    # A tower may refuse the padding image's shape (a minimum size, windows that must fit):
                    # it then runs unpadded, one graph per image size.
                    tower.__dict__[_PADDING_REFUSED] = repr(e)
                    _warn_once(type(tower).__name__, f"it refuses the padding image ({str(e).splitlines()[0][:200]})")
                else:
                    return cut_outputs(outputs, bucket, count, unit)
            return run(patches, grid_thw, count, kwargs)

    return forward


# ----------------------------------------------------------------------------- the fix


def _is_helper(value) -> bool:
    """A grid helper of Transformers: a ``get_*`` function of the helper modules taking the caller's kwargs."""
    value = getattr(value, "__wrapped__", value)
    module = getattr(value, "__module__", None)
    if module not in _HELPER_MODULES or not getattr(value, "__name__", "").startswith("get_"):
        return False
    try:
        return "kwargs" in inspect.signature(value).parameters
    except (TypeError, ValueError):
        return False


def record_helpers_of(tower) -> None:
    """Make the grid helpers that ``tower``'s modeling module calls record their results (see
    :func:`record_precomputed`); outside a recording they run as upstream's."""
    import sys

    module = sys.modules.get(type(tower).__module__)
    if module is None:
        return
    for name, value in list(vars(module).items()):
        if _is_helper(value):
            wrap(GRID_FIX, module, name, _recorded_helper)


def active() -> bool:
    """Whether the fix is applied and not switched off in this process."""
    from hf_neuron.patching import get_fix, is_enabled

    return get_fix(GRID_FIX).active and is_enabled(GRID_FIX)


def _grid_helpers_break_the_graph() -> bool:
    """Whether Transformers' grid helpers, as a vision tower calls them, break a compiled graph.

    Traces ``get_vision_position_ids`` and ``get_vision_cu_seqlens`` on a grid of two images: neither
    traces as one graph with static shapes. Also checks what the fix relies on, that both return a
    precomputed value handed to them in ``kwargs``."""
    from transformers import vision_utils

    from hf_neuron.patching.tracing import traces_whole

    grid = torch.tensor([[1, 2, 4], [1, 4, 2]])
    sentinel = torch.zeros(1)
    for helper in (vision_utils.get_vision_position_ids, vision_utils.get_vision_cu_seqlens):
        name = "position_ids" if helper is vision_utils.get_vision_position_ids else "cu_seqlens"
        args = (grid, 2) if name == "position_ids" else (grid,)
        if helper(*args, kwargs={name: sentinel}) is not sentinel:
            raise RuntimeError(f"vision_utils.{helper.__name__} no longer takes {name!r} precomputed")
    breaks = not traces_whole(lambda g: vision_utils.get_vision_position_ids(g, 2), grid)
    return breaks or not traces_whole(lambda g: vision_utils.get_vision_cu_seqlens(g), grid)


@fix(GRID_FIX, "transformers", _grid_helpers_break_the_graph, waits_for="transformers.vision_utils", modality="image")
def patch_static_grid_towers() -> None:
    """Dynamic-resolution vision towers compile a graph per image size and several per call.

    The towers that take a ``grid_thw`` derive rotary positions, attention segments and window order
    from the grid with Python loops and ``.tolist()``, and split their attention per image: graph
    breaks, and new graphs for every image size. Detected by tracing Transformers' grid helpers
    (``get_vision_position_ids``, ``get_vision_cu_seqlens``) on a grid: they do not trace as one graph. Patch: the helpers of ``transformers.vision_utils`` and
    ``get_max_seqlen`` can record what they compute, so that ``generate``'s compiled image encoder
    precomputes them outside the graph, pads the call's patches to a bucket of patch counts and runs
    the tower's compiled forward with a static-shape segment attention (see the module docstring).
    """
    register_static_varlen()


__all__ = ["GRID_FIX", "STATIC_VARLEN", "bucket_patches", "grid_tower", "merge_shape", "merge_unit", "padded_grid",
           "static_lengths",
           "record_precomputed", "static_grid_forward", "static_varlen_attention", "vision_bucket"]
