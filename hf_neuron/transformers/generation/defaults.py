"""What ``generate`` needs on Neuron filled in, and a prompt that does not fit refused before it compiles.

Generation on Trainium compiles one graph per prefill bucket plus one decode graph per (batch size,
``max_cache_len``) (:mod:`.chunked_prefill`), but only with a static cache, a cache length and a
static-shape compile config, settings users had to know by heart:

- ``generate-neuron-defaults``: static cache, ``max_cache_len``, ``prefill_chunk_size`` (prefill
  buckets 64 and 512) and a static-shape "neuron" compile config, where the user set none.
- ``generate-max-cache-len-check``: a prompt that does not fit ``max_cache_len`` silently grows
  the cache (new graphs); we raise before anything compiles.
- ``generate-cache-despite-config-use-cache-false``: a checkpoint configured for training
  (``use_cache=False``, MPT's default) generates without a cache, a new shape at every step.

:func:`generation_compiles` is the one decision of whether ``generate`` compiles a model on Neuron,
shared by these defaults, ``hf-neuron plan`` and the compatibility harness.
"""

from __future__ import annotations

import copy
import logging

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.generation.chunked_prefill import GENERATION_MODULE, probe_config
from hf_neuron.transformers.generation.prefill_schedule import check_prefill_buckets, prefill_buckets
from hf_neuron.transformers.generation.steps import generation_cache, generation_probe

logger = logging.getLogger("hf_neuron")

#: ``max_cache_len`` used for a model on Neuron when the user sets none. Every graph is compiled for
#: this cache length; prompt + max_new_tokens must fit in it.
DEFAULT_MAX_CACHE_LEN = 1024
#: The largest prefill bucket used when the user sets none.
DEFAULT_PREFILL_CHUNK_SIZE = 512
#: ``prefill_chunk_size`` used when the user sets none: two prefill buckets, each one graph (capped to
#: half of ``max_cache_len``). Measured by ``benchmarks/prefill_buckets.py`` on prompts of 5-1000 tokens: one
#: 512 chunk computes 3.7x the prompt tokens at batch size 1 (a 5-token prompt pays for 512), adding
#: the 64 bucket brings it to 1.2x for one more graph per batch size.
DEFAULT_PREFILL_BUCKETS = (64, DEFAULT_PREFILL_CHUNK_SIZE)

FIT_FIX = "generate-max-cache-len-check"
DEFAULTS_FIX = "generate-neuron-defaults"
USE_CACHE_FIX = "generate-cache-despite-config-use-cache-false"


def resolve_prefill_buckets(prefill_chunk_size=None, max_cache_len: int | None = None) -> tuple[int, ...]:
    """The prefill chunk sizes generate uses on Neuron, ascending: the given ``prefill_chunk_size`` (an
    int or a list), else :data:`DEFAULT_PREFILL_BUCKETS` capped to half the cache."""
    if prefill_chunk_size is not None:
        return prefill_buckets(prefill_chunk_size)
    # A chunk as long as the cache leaves no slot for generated tokens: the defaults stop at half of it.
    largest = max(1, (max_cache_len or DEFAULT_MAX_CACHE_LEN) // 2)
    return tuple(sorted({min(size, largest) for size in DEFAULT_PREFILL_BUCKETS}))


def resolve_prefill_chunk_size(prefill_chunk_size=None, max_cache_len: int | None = None) -> int:
    """The smallest prefill chunk generate uses on Neuron: prompts padded to a multiple of it need no
    more padding (see :func:`resolve_prefill_buckets`)."""
    return resolve_prefill_buckets(prefill_chunk_size, max_cache_len)[0]


def _static_cache_implementations() -> tuple[str, ...]:
    from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

    return tuple(ALL_STATIC_CACHE_IMPLEMENTATIONS)


def _will_compile(model, generation_config) -> bool:
    """Whether this generate call is set up to compile (Neuron, or an explicit compile config)."""
    if generation_config.disable_compile:
        return False
    return model_on_neuron(model) or generation_config.compile_config is not None


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


def _cache_grows_past_max_cache_len() -> bool:
    from transformers import GenerationConfig

    probe = generation_probe(probe_config())
    generation_config = GenerationConfig(
        cache_implementation="static", max_cache_len=4, num_beams=1, num_return_sequences=1, use_cache=True
    )
    generation_config.compile_config = None
    model_kwargs: dict = {}
    try:
        probe._prepare_cache_for_generation(generation_config, model_kwargs, None, 1, 16)
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
    from hf_neuron.transformers.models.rwkv import generates_with_state_cache

    name = type(model).__name__
    # Upstream names the models that keep their own state; hf_neuron gives RWKV's a static cache (models/rwkv.py).
    if not model._supports_default_dynamic_cache() and not generates_with_state_cache(model):
        return False, (f"{name} keeps its own generation state instead of a transformers Cache (recurrent or "
                       "convolutional state), so there is no static cache to compile with")
    if getattr(model, "_can_compile_fullgraph", False):
        return True, None
    # Upstream's flag is a hand-kept class-wide note, often stale: the forward itself is asked.
    from hf_neuron.transformers.generation.capture import forward_traces_whole

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
        # An encoder-decoder's decoder prompt is its start token: nothing to prefill in chunks.
        if (generation_config.prefill_chunk_size is None and "prefill_chunk_size" not in kwargs
                and not getattr(self.config, "is_encoder_decoder", False)):
            buckets = resolve_prefill_buckets(None, generation_config.max_cache_len)
            generation_config.prefill_chunk_size = list(buckets) if len(buckets) > 1 else buckets[0]
            applied.append(f"prefill_chunk_size={generation_config.prefill_chunk_size}")
        if generation_config.prefill_chunk_size is not None:
            # A bad bucket list fails here, before a cache is allocated or a graph compiled.
            check_prefill_buckets(generation_config.prefill_chunk_size, generation_config.max_cache_len)
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
    ``max_cache_len=1024``, ``prefill_chunk_size=[64, 512]`` (prefill buckets, capped to half of
    ``max_cache_len``), and a "neuron" compile config with ``dynamic=False, mode="default"`` - logged
    once at info level. A bad ``prefill_chunk_size`` (sizes not positive, repeated, or longer than
    ``max_cache_len``) raises here, before a cache is allocated.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(DEFAULTS_FIX, GenerationMixin, "_prepare_generation_config", _prepare_generation_config_with_neuron_defaults)


# ----------------------------------------------------------------------------- checkpoint use_cache=False


def _generate_with_the_cache(original_fn, self, *args, **kwargs):
    config = getattr(self, "generation_config", None)
    model_config = getattr(self, "config", None)
    if (not model_on_neuron(self) or config is None or model_config is None or config.use_cache is not False
            or "use_cache" in kwargs or kwargs.get("generation_config") is not None
            or (args and args[0] is not None and not isinstance(args[0], torch.Tensor))
            or getattr(model_config.get_text_config(decoder=True), "use_cache", None) is not False):
        return original_fn(self, *args, **kwargs)
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


__all__ = [
    "DEFAULT_MAX_CACHE_LEN", "DEFAULT_PREFILL_BUCKETS", "DEFAULT_PREFILL_CHUNK_SIZE", "resolve_prefill_buckets",
    "resolve_prefill_chunk_size",
]
