"""Forwards that read the static cache's length inside the compiled graph.

A static cache keeps its length as a 0-d tensor (``cumulative_length``) so that a compiled forward
does not guard on a Python int that changes at every step. Two forwards turn that tensor back into
a Python value inside the graph, which a static-shape compiler cannot do (the value is only known
when the graph runs: Dynamo calls it a data-dependent, "unbacked", value):

- ``mpt-alibi-query-length``: MPT's attention adds ``cache.get_seq_length()`` to the chunk length
  and slices its ALiBi bias with ``max(0, bias rows - that length)``. The bias has a single row
  (ALiBi depends on the key position only), so the slice start is 0 whatever the length, but the
  graph cannot know it: every prefill chunk and decode step of MPT fails to trace
  (``PendingUnbackedSymbolNotFound``) and generate compiles one graph per piece, about ten per batch
  size.
- ``static-sliding-window-mask-sizes-traced``: Inkling's attention asks the cache for its mask
  sizes (``get_mask_sizes``) to build a learned relative-position bias for the keys it attends to.
  hf_neuron's sliding-window layer (``static-sliding-window-cache``) answers with an int offset read
  off the length tensor, which is right where masks are built (before the compiled forward, in
  ``prepare_inputs_for_generation``) but data dependent inside it. While a graph is traced (Dynamo
  compiling, or fake tensors measuring the first forward's cache states) the offset is returned as
  the 0-d tensor it is computed from; the key positions built from it are the same numbers.

:func:`generation_step_inputs` gives a traced or measured forward the attention masks ``generate``
passes it (built by ``prepare_inputs_for_generation`` outside the forward) instead of a 2D mask the
forward would turn into masks itself, inside the graph.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, get_fix, is_enabled, original, wrap

MPT_FIX = "mpt-alibi-query-length"
MASK_SIZES_FIX = "static-sliding-window-mask-sizes-traced"
HYBRID_SLIDING_FIX = "hybrid-sliding-generate-mask"
USE_CACHE_FIX = "generate-cache-despite-config-use-cache-false"

#: The hf_neuron fix whose sliding-window layout :data:`MASK_SIZES_FIX` reports in tensor form.
SLIDING_WINDOW_FIX = "static-sliding-window-cache"


# ----------------------------------------------------------------------------- masks as generate builds them


def _cache_parameter(function) -> str:
    """The name under which ``function`` takes the cache (it was renamed between releases)."""
    import inspect

    from hf_neuron.transformers.generation import CACHE_KEYWORDS

    parameters = inspect.signature(function).parameters
    for name in CACHE_KEYWORDS:
        if name in parameters:
            return name
    raise RuntimeError(f"{function.__qualname__} takes none of {CACHE_KEYWORDS} (parameters: {list(parameters)})")


def generation_step_inputs(model, inputs: dict, *, first: bool) -> dict:
    """``inputs`` (2D ``attention_mask``, a cache) with the attention masks ``generate`` would pass.

    ``generate`` builds the masks of a compileable cache in ``prepare_inputs_for_generation``, outside
    the compiled forward, from the cache's current sizes; a forward given a 2D mask builds them inside
    instead, where a cache length read as an int is data dependent. A cache of recurrent layers only
    keeps the 2D mask, of the step's own tokens, or none after the prefill (as state-space models'
    input preparation drops it). Returns ``inputs`` unchanged when ``generate`` would pass the 2D mask
    too (no compileable cache)."""
    from hf_neuron.transformers.generation import cache_keyword, generation_cache
    from hf_neuron.transformers.recurrent_cache import recurrent_only

    cache = generation_cache(inputs)
    mask = inputs.get("attention_mask")
    if cache is None or not getattr(cache, "is_compileable", False) or mask is None or mask.dim() != 2:
        return inputs
    if recurrent_only(cache):
        tokens = inputs["input_ids"].shape[-1]
        prepared = model.prepare_inputs_for_generation(
            inputs["input_ids"], attention_mask=mask[:, -tokens:].clone(), is_first_iteration=first, use_cache=True,
            **{cache_keyword(): cache},
        )
        return {**inputs, "attention_mask": prepared.get("attention_mask")}
    prepared = model.prepare_inputs_for_generation(
        inputs["input_ids"], attention_mask=mask, is_first_iteration=first, use_cache=True,
        **{cache_keyword(): cache},
    )
    return {**inputs, "attention_mask": prepared.get("attention_mask", mask)}


# ----------------------------------------------------------------------------- sliding-window mask sizes


def _sliding_window_layout_active() -> bool:
    return get_fix(SLIDING_WINDOW_FIX).active and is_enabled(SLIDING_WINDOW_FIX)


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
    # hf_neuron's layout (see hf_neuron.transformers.cache): the S buffered slots then the q new keys,
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

    from hf_neuron.transformers import cache as sliding_window

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
            sliding_window._get_mask_sizes(None, layer, 1)
        except DataDependent:
            return True
    return False


@fix(MASK_SIZES_FIX, "transformers", _mask_sizes_data_dependent_when_traced, waits_for="transformers.cache_utils")
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
              _cache_parameter(create_masks_for_generate): cache, "position_ids": torch.arange(4)[None]}
    masks = create_masks_for_generate(**kwargs)
    window = create_sliding_window_causal_mask(**kwargs)
    built = masks.get("sliding_attention") if isinstance(masks, dict) else None
    return not (isinstance(built, torch.Tensor) and isinstance(window, torch.Tensor) and built.shape == window.shape
                and torch.equal(built, window))


@fix(HYBRID_SLIDING_FIX, "transformers", _hybrid_sliding_mask_ignores_the_window,
     waits_for="transformers.masking_utils")
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


# ----------------------------------------------------------------------------- checkpoint use_cache=False


def _generate_with_the_cache(original_fn, self, *args, **kwargs):
    from hf_neuron.devices import model_on_neuron

    config = getattr(self, "generation_config", None)
    model_config = getattr(self, "config", None)
    if (not model_on_neuron(self) or config is None or model_config is None or config.use_cache is not False
            or "use_cache" in kwargs or kwargs.get("generation_config") is not None
            or (args and args[0] is not None and not isinstance(args[0], torch.Tensor))
            or getattr(model_config.get_text_config(decoder=True), "use_cache", None) is not False):
        return original_fn(self, *args, **kwargs)
    from hf_neuron.transformers.generation import generation_compiles

    if not generation_compiles(self)[0]:
        return original_fn(self, *args, **kwargs)
    # The flag came from the model configuration, not from this call: generate with the cache (the
    # same tokens), which is what makes a compiled generation possible. Put back afterwards.
    config.use_cache = True
    try:
        return original_fn(self, *args, **kwargs)
    finally:
        config.use_cache = False


def _training_flag_turns_the_cache_off() -> bool:
    """Whether a model configuration's ``use_cache=False`` becomes generate's default."""
    from transformers import GenerationConfig, LlamaConfig

    return GenerationConfig.from_model_config(LlamaConfig(use_cache=False)).use_cache is False


@fix(USE_CACHE_FIX, "transformers", _training_flag_turns_the_cache_off, waits_for="transformers.generation.utils")
def patch_generate_uses_the_cache() -> None:
    """A checkpoint whose model configuration says ``use_cache=False`` (MPT's default, a training
    setting) generates without a cache: every step recomputes the whole sequence at a new length, so
    on Neuron nothing can compile into two graphs (and chunked prefill raises "Cannot use prefill
    chunking without a cache").

    Detected by deriving a generation config from a model config with ``use_cache=False``. Patch: for
    a model on a neuron device whose forward compiles, when neither the call nor a generation config
    passed to it sets ``use_cache``, generate uses the cache; the model's generation config is left
    as it was.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(USE_CACHE_FIX, GenerationMixin, "generate", _generate_with_the_cache)


# ----------------------------------------------------------------------------- MPT


class _CacheWithoutLength:
    """The cache, as MPT's attention sees it for its ALiBi slice: updates go through, the length reads 0.

    Only used when the bias has no more rows than the chunk has tokens, where the slice start,
    ``max(0, rows - (tokens + length))``, is 0 for every length. The attention calls nothing else
    on the cache (checked by the detection's stub, which has nothing else either)."""

    def __init__(self, cache):
        self.cache = cache

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def update(self, *args, **kwargs):
        return self.cache.update(*args, **kwargs)


#: The name MPT's attention takes the cache under, set when the fix is applied.
_MPT_CACHE_PARAMETER: list[str] = []


def _mpt_attention_without_length_read(original_fn, self, hidden_states, position_bias, *args, **kwargs):
    keyword = _MPT_CACHE_PARAMETER[0]
    cache = kwargs.get(keyword)
    if (cache is not None and hidden_states.device.type == "neuron" and isinstance(position_bias, torch.Tensor)
            and position_bias.dim() == 3 and position_bias.shape[1] <= hidden_states.shape[1]):
        kwargs[keyword] = _CacheWithoutLength(cache)
    return original_fn(self, hidden_states, position_bias, *args, **kwargs)


def _mpt_reads_cache_length() -> bool:
    """Whether MPT's attention asks the cache for its length (run on a stub cache, tiny sizes)."""
    from transformers import MptConfig
    from transformers.models.mpt.modeling_mpt import MptAttention, build_mpt_alibi_tensor

    reads = []

    class _Stub:
        def update(self, key_states, value_states, *args, **kwargs):
            return key_states, value_states

        def get_seq_length(self, layer_idx: int = 0):
            reads.append(layer_idx)
            return 0

    config = MptConfig(d_model=8, n_heads=2, n_layers=1, max_seq_len=4, vocab_size=8)
    attention = MptAttention(config, layer_idx=0)
    with torch.no_grad():
        forward = original(MptAttention, "forward")
        forward(attention, torch.zeros(1, 2, 8), build_mpt_alibi_tensor(2, 4), **{_cache_parameter(forward): _Stub()})
    return bool(reads)


@fix(MPT_FIX, "transformers", _mpt_reads_cache_length, waits_for="transformers.models.mpt.modeling_mpt")
def patch_mpt_alibi_query_length() -> None:
    """MPT's compiled prefill chunks and decode steps break on a data-dependent ALiBi slice built from
    the static cache's length, so generate compiles about ten graphs per batch size instead of two.

    Gap: ``MptAttention.forward`` slices its one-row ALiBi bias from row ``max(0, 1 - (tokens +
    cache.get_seq_length()))``, always 0, but a tensor-valued length makes it an unknown value in the
    graph. Detected by running the attention on a stub cache and seeing it read the length. Patch
    (MPT's own module: the read is in its attention, not a shared mechanism): on a neuron device,
    when the bias has no more rows than the chunk has tokens, the attention sees a length of 0,
    which gives the same slice; cache updates are unchanged.
    """
    from transformers.models.mpt.modeling_mpt import MptAttention

    # Looked up once here: the wrapper runs inside compiled forwards.
    _MPT_CACHE_PARAMETER[:] = [_cache_parameter(MptAttention.forward)]
    wrap(MPT_FIX, MptAttention, "forward", _mpt_attention_without_length_read)


__all__ = ["HYBRID_SLIDING_FIX", "MASK_SIZES_FIX", "MPT_FIX", "USE_CACHE_FIX", "generation_step_inputs"]
