"""``generate()`` that compiles exactly two graphs per (batch size, ``max_cache_len``) on Neuron.

On Trainium every distinct graph is a neuronx-cc compile of minutes, so generation must reuse one
prefill-chunk graph and one decode graph. Upstream Transformers already has the pieces (static
cache, chunked prefill, the "neuron" auto-compile path); these fixes close the gaps that make it
compile more graphs than that, and fill in the recipe for a model on a neuron device:

- ``generate-prefill-chunk-strides``: prefill chunks of ``position_ids`` are views of the whole
  prompt's tensor, so their stride (and Dynamo's guard) changes with the prompt length.
- ``generate-compiled-prefill-mask``: the first chunk may get no mask (SDPA ``is_causal`` skip)
  and the next ones a mask tensor: two prefill graphs.
- ``generate-pad-prompt-to-chunk``: a prompt that is not a multiple of the chunk size ends with a
  shorter chunk: one more graph per distinct remainder. We left-pad inside ``generate``.
- ``generate-max-cache-len-check``: a prompt that does not fit ``max_cache_len`` silently grows
  the cache (new graphs); we raise before anything compiles.
- ``generate-neuron-defaults``: static cache, ``max_cache_len``, ``prefill_chunk_size`` and a
  static-shape "neuron" compile config, where the user set none.

The sliding-window cache fix lives in :mod:`hf_neuron.transformers.cache`.
"""

from __future__ import annotations

import copy
import logging

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, wrap

logger = logging.getLogger("hf_neuron")

#: ``max_cache_len`` used for a model on Neuron when the user sets none. Every graph is compiled for
#: this cache length; prompt + max_new_tokens must fit in it.
DEFAULT_MAX_CACHE_LEN = 1024
#: ``prefill_chunk_size`` used when the user sets none (capped to ``max_cache_len``).
DEFAULT_PREFILL_CHUNK_SIZE = 512

GENERATION_MODULE = "transformers.generation.utils"

STRIDES_FIX = "generate-prefill-chunk-strides"
MASK_FIX = "generate-compiled-prefill-mask"
PAD_FIX = "generate-pad-prompt-to-chunk"
FIT_FIX = "generate-max-cache-len-check"
DEFAULTS_FIX = "generate-neuron-defaults"


#: Keywords under which ``generate`` takes the cache from the caller and keeps it in ``model_kwargs``,
#: newest first (Transformers renamed ``past_key_values`` to ``cache``; the old name is still accepted
#: by ``generate`` and renamed on entry).
CACHE_KEYWORDS = ("cache", "past_key_values")


def generation_cache(kwargs: dict):
    """The cache in ``generate``'s keyword arguments or ``model_kwargs``, whatever its keyword, or None."""
    for key in CACHE_KEYWORDS:
        value = kwargs.get(key)
        if value is not None:
            return value
    return None


def cache_keyword() -> str:
    """The keyword the installed ``prepare_inputs_for_generation`` takes the cache as."""
    import inspect

    from transformers.generation.utils import GenerationMixin

    parameters = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    for key in CACHE_KEYWORDS:
        if key in parameters:
            return key
    raise RuntimeError(f"prepare_inputs_for_generation takes none of {CACHE_KEYWORDS} (parameters: {list(parameters)})")


def resolve_prefill_chunk_size(prefill_chunk_size: int | None = None, max_cache_len: int | None = None) -> int:
    """The chunk size generate uses on Neuron: the given one, else our default capped to the cache."""
    if prefill_chunk_size is not None:
        return int(prefill_chunk_size)
    return min(DEFAULT_PREFILL_CHUNK_SIZE, max_cache_len or DEFAULT_MAX_CACHE_LEN)


def _static_cache_implementations() -> tuple[str, ...]:
    from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

    return tuple(ALL_STATIC_CACHE_IMPLEMENTATIONS)


def _will_compile(model, generation_config) -> bool:
    """Whether this generate call is set up to compile (Neuron, or an explicit compile config)."""
    if generation_config.disable_compile:
        return False
    return model_on_neuron(model) or generation_config.compile_config is not None


# ----------------------------------------------------------------------------- chunk strides


def _dense_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _with_dense_strides(value):
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.stride() != _dense_strides(value.shape):
        return value.clone(memory_format=torch.contiguous_format)
    return value


def _prepare_inputs_with_dense_strides(original, self, *args, **kwargs):
    model_inputs = original(self, *args, **kwargs)
    for key, value in list(model_inputs.items()):
        if isinstance(value, dict):  # per-layer-type masks of hybrid models: {"linear_attention": ..., ...}
            model_inputs[key] = {name: _with_dense_strides(v) for name, v in value.items()}
        else:
            model_inputs[key] = _with_dense_strides(value)
    return model_inputs


def _chunk_inputs_keep_parent_strides() -> bool:
    import types

    from transformers.generation.utils import GenerationMixin

    probe = types.SimpleNamespace(
        config=types.SimpleNamespace(is_encoder_decoder=False),
        device=torch.device("meta"),
        dtype=torch.float32,
        is_remote_code=lambda: False,
    )
    whole = torch.arange(8).unsqueeze(0)
    chunk = whole[..., 2:4]
    inputs = GenerationMixin.prepare_inputs_for_generation(
        probe, torch.zeros(1, 2, dtype=torch.long), position_ids=chunk, use_cache=True
    )
    return inputs["position_ids"].stride() != _dense_strides(chunk.shape)


@fix(STRIDES_FIX, "transformers", _chunk_inputs_keep_parent_strides, waits_for=GENERATION_MODULE)
def patch_prefill_chunk_strides() -> None:
    """Each prefill chunk has different input strides, so Dynamo compiles one graph per prompt length.

    Gap: ``_prefill`` slices ``position_ids[..., start:end]`` out of the whole prompt's tensor and
    ``prepare_inputs_for_generation`` passes the view on, whose stride is the prompt length; Dynamo
    guards on strides (measured: 6 graphs for 8 prompts padded to a multiple of the chunk).
    Detected by preparing inputs from such a view and looking at the strides. Patch: model inputs
    with non-dense strides are cloned to contiguous tensors (small: ids, positions and masks, also
    the per-layer-type masks hybrid models take as a dict).
    """
    from transformers.generation.utils import GenerationMixin

    wrap(STRIDES_FIX, GenerationMixin, "prepare_inputs_for_generation", _prepare_inputs_with_dense_strides)


# ----------------------------------------------------------------------------- prefill masks

# A plain module global, not a ContextVar: the mask function runs inside compiled forwards, where
# Dynamo reads a global (and guards on it) but breaks the graph on ContextVar.get().
_compiled_prefill_active = False


def _prefill_flagging_compiled_masks(original, self, input_ids, generation_config, model_kwargs, *args, **kwargs):
    global _compiled_prefill_active
    compiled = generation_config.prefill_chunk_size is not None and self._valid_auto_compile_criteria(
        model_kwargs, generation_config
    )
    previous = _compiled_prefill_active
    _compiled_prefill_active = bool(compiled)
    try:
        return original(self, input_ids, generation_config, model_kwargs, *args, **kwargs)
    finally:
        _compiled_prefill_active = previous


def _sdpa_mask_materialized_in_compiled_prefill(original, *args, **kwargs):
    if _compiled_prefill_active:
        kwargs["allow_is_causal_skip"] = False
    return original(*args, **kwargs)


def _sdpa_skips_static_prefill_mask() -> bool:
    from transformers.masking_utils import sdpa_mask

    mask = sdpa_mask(
        batch_size=1,
        q_length=2,
        kv_length=4,
        q_offset=torch.tensor(0),
        attention_mask=torch.ones(1, 2, dtype=torch.bool),
    )
    return mask is None


@fix(MASK_FIX, "transformers", _sdpa_skips_static_prefill_mask, waits_for=GENERATION_MODULE)
def patch_compiled_prefill_mask() -> None:
    """A compiled chunked prefill gets a mask tensor for some chunks and ``None`` for others.

    Gap: with SDPA, the mask of a chunk whose keys need no padding mask is skipped (``is_causal``),
    on the assumption that prefill is not compiled; with ``prefill_chunk_size`` it is, so the
    ``None`` and tensor masks make two prefill graphs. Detected by asking ``sdpa_mask`` for the
    first chunk of a static cache. Patch: while ``generate`` runs a compiled chunked prefill, the
    registered "sdpa" mask function always materializes the mask.
    """
    from transformers.generation.utils import GenerationMixin
    from transformers.masking_utils import AttentionMaskInterface

    wrap(MASK_FIX, GenerationMixin, "_prefill", _prefill_flagging_compiled_masks)
    wrap(
        MASK_FIX,
        AttentionMaskInterface._global_mapping,
        "sdpa",
        _sdpa_mask_materialized_in_compiled_prefill,
        mapping=True,
    )


# ----------------------------------------------------------------------------- prompt padding

_warned_no_room = False


def _full_attention_capacity(cache) -> int | None:
    """Slots of the non-sliding static layers (sliding layers never run out)."""
    capacities = [
        layer.max_cache_len
        for layer in getattr(cache, "layers", ())
        if hasattr(layer, "max_cache_len") and not getattr(layer, "is_sliding", False)
    ]
    return min(capacities) if capacities else None


def _given(value) -> bool:
    """An input is given: not None, and not an empty container (multimodal classes pass an empty
    ``mm_encoder_outputs`` dict with a text-only prompt)."""
    if isinstance(value, dict):
        return any(_given(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_given(v) for v in value)
    return value is not None


def _holds_no_tokens(cache) -> bool:
    """Whether ``cache`` starts a generation. A cache of recurrent layers only keeps no length; its
    prefill takes the prompt as new tokens, as upstream's unchunked prefill does."""
    from hf_neuron.transformers.recurrent_cache import recurrent_only

    return recurrent_only(cache) or int(cache.get_seq_length()) == 0


def _prompt_padding(self, input_ids, generation_config, model_kwargs, is_first_iteration) -> int:
    """Tokens to add on the left so that every prefill chunk is full, or 0."""
    from transformers.generation.utils import MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL

    chunk = generation_config.prefill_chunk_size
    if not chunk or not is_first_iteration or self.config.is_encoder_decoder or input_ids.dim() != 2:
        return 0
    length = input_ids.shape[1]
    padding = -length % chunk
    if padding == 0 or model_kwargs.get("inputs_embeds") is not None:
        return 0
    # Padding would move the positions of image or audio tokens: only text prompts are padded.
    if any(_given(model_kwargs.get(key)) for key in MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL):
        return 0
    if any(_given(model_kwargs.get(key)) for key in ("mm_token_type_ids", "moe_mm_token_type_ids")):
        return 0
    cache = generation_cache(model_kwargs)
    if cache is None or not getattr(cache, "is_compileable", False) or not _holds_no_tokens(cache):
        return 0
    if generation_config._pad_token_tensor is None:
        return 0
    if not self._valid_auto_compile_criteria(model_kwargs, generation_config):
        return 0
    capacity = _full_attention_capacity(cache)
    new_tokens = generation_config.max_length - length
    if capacity is not None and length + padding + new_tokens - 1 > capacity:
        global _warned_no_room
        if not _warned_no_room:
            _warned_no_room = True
            logger.warning(
                "hf_neuron: the prompt (%d tokens) padded to a multiple of prefill_chunk_size=%d plus "
                "max_new_tokens=%d does not fit the static cache (%d slots); generating without padding, "
                "which compiles one more prefill graph. Raise max_cache_len to avoid it.",
                length,
                chunk,
                new_tokens,
                capacity,
            )
        return 0
    return padding


def _prefill_with_padded_prompt(original, self, input_ids, generation_config, model_kwargs, *args, **kwargs):
    padding = _prompt_padding(self, input_ids, generation_config, model_kwargs, kwargs.get("is_first_iteration", True))
    if padding:
        batch, length = input_ids.shape
        attention_mask = model_kwargs.get("attention_mask")
        if attention_mask is None:
            attention_mask = input_ids.new_ones((batch, length))
        pad_id = generation_config._pad_token_tensor.to(input_ids.device)
        input_ids = torch.cat([pad_id.expand(batch, padding).to(input_ids.dtype), input_ids], dim=-1)
        model_kwargs["attention_mask"] = torch.nn.functional.pad(attention_mask, (padding, 0), value=0)
        for key in ("position_ids", "token_type_ids"):
            if model_kwargs.get(key) is not None:
                model_kwargs[key] = torch.nn.functional.pad(model_kwargs[key], (padding, 0), value=0)
    return original(self, input_ids, generation_config, model_kwargs, *args, **kwargs)


def _generate_leaves_last_chunk_short() -> bool:
    import types

    from transformers import GenerationConfig, StaticCache
    from transformers.generation.utils import GenerationMixin

    chunk_lengths = []

    class _Probe(GenerationMixin):
        config = _probe_config()
        device = torch.device("cpu")
        dtype = torch.float32

        def is_remote_code(self):
            return False

        def _valid_auto_compile_criteria(self, model_kwargs, generation_config):
            return True

        def get_compiled_call(self, compile_config):
            return self.__call__

        def __call__(self, input_ids=None, **kwargs):
            chunk_lengths.append(input_ids.shape[-1])
            cache = generation_cache(kwargs)
            return types.SimpleNamespace(cache=cache, past_key_values=cache)

    cache = StaticCache(config=_probe_config(), max_cache_len=16)
    generation_config = GenerationConfig(prefill_chunk_size=4, pad_token_id=0, max_length=8)
    generation_config._pad_token_tensor = torch.tensor(0)
    model_kwargs = {cache_keyword(): cache, "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    GenerationMixin._prefill(_Probe(), torch.ones(1, 6, dtype=torch.long), generation_config, model_kwargs)
    return chunk_lengths[-1] != chunk_lengths[0]


@fix(PAD_FIX, "transformers", _generate_leaves_last_chunk_short, waits_for=GENERATION_MODULE)
def patch_pad_prompt_to_chunk() -> None:
    """A prompt whose length is not a multiple of ``prefill_chunk_size`` compiles one more graph.

    Gap: chunked prefill splits the prompt into full chunks and a remainder; every distinct
    remainder is a new static shape (measured: 21 graphs for 8 unpadded prompts). Detected by running
    upstream ``_prefill`` on a probe model and comparing the chunk lengths. Patch: when the prefill
    is compiled, ``generate`` left-pads the prompt batch to a multiple of the chunk size with the pad
    token, a zero attention mask and zero positions (what tokenizer left padding gives) for the
    prefill only: the returned sequences and ``max_new_tokens`` are unchanged.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(PAD_FIX, GenerationMixin, "_prefill", _prefill_with_padded_prompt)


# ----------------------------------------------------------------------------- max_cache_len check


def _check_prompt_fits(original, self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length):
    limit = generation_config.max_cache_len
    if (
        limit is not None
        and generation_config.cache_implementation in _static_cache_implementations()
        and generation_cache(model_kwargs) is None
        and _will_compile(self, generation_config)
    ):
        needed = max_cache_length + 1  # generate sizes the cache max_length - 1 = prompt + max_new_tokens - 1
        if needed > limit:
            new = generation_config.max_new_tokens
            what = f"prompt ({needed - new} tokens) + max_new_tokens ({new})" if new is not None else "max_length"
            raise ValueError(
                f"{what} = {needed} does not fit max_cache_len={limit}. The static cache, and every graph "
                f"compiled for it, is sized by max_cache_len; pass generate(..., max_cache_len=N) with "
                f"N >= {needed} (each value compiles its own graphs), or shorten the prompt or max_new_tokens."
            )
    return original(self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length)


def _probe_config():
    """A one-layer Llama config for the probes (configuration only: no modeling code is imported)."""
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=1, intermediate_size=8, vocab_size=16)


def _cache_grows_past_max_cache_len() -> bool:
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    class _Probe(GenerationMixin):
        config = _probe_config()
        device = torch.device("cpu")
        dtype = torch.float32

    generation_config = GenerationConfig(
        cache_implementation="static", max_cache_len=4, num_beams=1, num_return_sequences=1, use_cache=True
    )
    generation_config.compile_config = None
    model_kwargs: dict = {}
    try:
        _Probe()._prepare_cache_for_generation(generation_config, model_kwargs, None, 1, 16)
    except ValueError:
        return False
    return generation_cache(model_kwargs).get_max_length() > 4


@fix(FIT_FIX, "transformers", _cache_grows_past_max_cache_len, waits_for=GENERATION_MODULE)
def patch_max_cache_len_check() -> None:
    """A prompt that does not fit ``max_cache_len`` silently grows the static cache (and recompiles).

    Gap: ``generate`` sizes the static cache ``max(prompt + max_new_tokens - 1, max_cache_len)``,
    so an oversized request gets a new cache shape, new graphs, and a larger cache for every later
    call. Detected by preparing a static cache for more tokens than ``max_cache_len``. Patch: when
    the call compiles (model on Neuron or a compile config given), prompt + max_new_tokens >
    max_cache_len raises a ValueError saying what to change, before the cache is allocated.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(FIT_FIX, GenerationMixin, "_prepare_cache_for_generation", _check_prompt_fits)


# ----------------------------------------------------------------------------- defaults

_logged_defaults: set[tuple] = set()


def _neuron_compile_config(model, compile_config):
    from transformers import CompileConfig

    if compile_config is None:
        default = model._default_compile_config() if hasattr(model, "_default_compile_config") else None
        if default is not None and (default.backend, default.dynamic, default.mode) == ("neuron", False, "default"):
            return None, None  # upstream's own default for a neuron device is right
        return CompileConfig(backend="neuron", fullgraph=False, dynamic=False, mode="default"), "compile_config"
    if compile_config.backend != "neuron":
        return compile_config, None
    changed = []
    # The dataclass default mode ("reduce-overhead") means "not set"; TorchNeuron only has "default".
    if compile_config.mode == CompileConfig.mode:
        changed.append("mode")
    if compile_config.dynamic is None:
        changed.append("dynamic")
    if not changed:
        return compile_config, None
    compile_config = copy.copy(compile_config)
    if "mode" in changed:
        compile_config.mode = "default"
    if "dynamic" in changed:
        compile_config.dynamic = False
    return compile_config, "compile_config." + "/".join(changed)


def generation_compiles(model) -> tuple[bool, str | None]:
    """Whether ``generate`` compiles ``model`` on Neuron, and why not: the one decision hf_neuron's
    generation defaults, ``hf-neuron plan`` and the compatibility harness share."""
    name = type(model).__name__
    if not model._supports_default_dynamic_cache():
        return False, (f"{name} keeps its own generation state instead of a transformers Cache (recurrent or "
                       "convolutional state), so there is no static cache to compile with")
    if getattr(model, "_can_compile_fullgraph", False):
        return True, None
    # Upstream's flag is a hand-kept class-wide note, often stale: the forward itself is asked.
    from hf_neuron.transformers.capture import forward_traces_whole

    traces, why = forward_traces_whole(model)
    if traces:
        return True, None
    return False, f"{name} sets _can_compile_fullgraph=False and {why}, so generate keeps a dynamic cache and does not compile"


def _wants_default_static_cache(model, generation_config, kwargs) -> bool:
    if "cache_implementation" in kwargs or generation_cache(kwargs) is not None:
        return False
    for config in (generation_config, model.generation_config):
        if config is not None and config.cache_implementation not in (None, "hybrid"):
            return False  # "hybrid" is a legacy Hub default that upstream unsets
        if config is not None and config.use_cache is False:
            return False
    if kwargs.get("use_cache") is False:
        return False
    return generation_compiles(model)[0]


def _prepare_generation_config_with_neuron_defaults(original, self, generation_config=None, **kwargs):
    if not model_on_neuron(self):
        return original(self, generation_config, **kwargs)
    applied = []
    # Decided before the merge so that upstream validates max_cache_len against the static cache.
    if _wants_default_static_cache(self, generation_config, kwargs):
        kwargs["cache_implementation"] = "static"
        applied.append("cache_implementation='static'")
    generation_config, model_kwargs = original(self, generation_config, **kwargs)
    if generation_config.cache_implementation in _static_cache_implementations():
        if generation_config.max_cache_len is None and "max_cache_len" not in kwargs:
            generation_config.max_cache_len = DEFAULT_MAX_CACHE_LEN
            applied.append(f"max_cache_len={DEFAULT_MAX_CACHE_LEN}")
        if generation_config.prefill_chunk_size is None and "prefill_chunk_size" not in kwargs:
            generation_config.prefill_chunk_size = resolve_prefill_chunk_size(None, generation_config.max_cache_len)
            applied.append(f"prefill_chunk_size={generation_config.prefill_chunk_size}")
    compile_config, what = _neuron_compile_config(self, generation_config.compile_config)
    if what is not None:
        generation_config.compile_config = compile_config
        applied.append(f"{what} (backend='neuron', dynamic=False, mode='default')")
    key = tuple(applied)
    if applied and key not in _logged_defaults:
        _logged_defaults.add(key)
        logger.info("hf_neuron: generate() defaults for a model on Neuron (not set by you): %s", ", ".join(applied))
    return generation_config, model_kwargs


def _no_neuron_generation_defaults() -> bool:
    import types

    from transformers import GenerationConfig, PretrainedConfig
    from transformers.generation.utils import GenerationMixin

    probe = types.SimpleNamespace(config=PretrainedConfig(), generation_config=GenerationConfig())
    probe.device = torch.device("meta")  # the merge does not look at the device upstream
    generation_config, _ = GenerationMixin._prepare_generation_config(probe, None)
    return generation_config.cache_implementation is None or generation_config.prefill_chunk_size is None


@fix(DEFAULTS_FIX, "transformers", _no_neuron_generation_defaults, waits_for=GENERATION_MODULE)
def patch_neuron_generation_defaults() -> None:
    """Generation on Neuron needs a hand-typed recipe to compile at all (static cache, chunking, backend).

    Gap: without ``cache_implementation="static"`` generate does not compile; without
    ``max_cache_len`` and ``prefill_chunk_size`` shapes follow each prompt; a ``CompileConfig`` left
    at its defaults passes ``mode="reduce-overhead"`` (and automatic dynamic shapes) to the "neuron"
    backend. Detected by merging an empty generation config: upstream leaves these unset. Patch: for
    a model on a neuron device, fill only what the user did not set - static cache,
    ``max_cache_len=1024``, ``prefill_chunk_size=min(512, max_cache_len)``, and a "neuron" compile
    config with ``dynamic=False, mode="default"`` - logged once at info level.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(DEFAULTS_FIX, GenerationMixin, "_prepare_generation_config", _prepare_generation_config_with_neuron_defaults)


__all__ = ["DEFAULT_MAX_CACHE_LEN", "DEFAULT_PREFILL_CHUNK_SIZE", "resolve_prefill_chunk_size"]
