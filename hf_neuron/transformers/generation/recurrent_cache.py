"""Compiled generation for models whose whole cache is recurrent state (Mamba, Falcon-Mamba, Mamba-2).

A state-space model caches no keys or values: each layer keeps a convolution window and a recurrent
state of fixed size, which is what a static cache needs. Transformers' static cache holds them
(``LinearAttentionLayer``), but its chunked prefill, the path generation compiles on Neuron, was
written for caches with at least one attention layer. Three gaps keep these models on the eager path:

- ``static-cache-recurrent-only``: the early allocation of a chunked prefill's static cache asks the
  config for key/value heads (``num_attention_heads``), which a state-space config does not have: the
  allocation fails before the first forward, so no static cache can be made.
- ``generate-chunked-prefill-recurrent-cache``: the chunked prefill gives each chunk the attention
  mask up to the chunk's end, wider than the chunk, which Mamba multiplies into its hidden states (a
  shape error) and Mamba-2 slices inside its forward (one graph per mask width); before Transformers
  5.25 it also asks the cache for its length (``get_seq_length``), which a cache without attention
  layers refuses (``ValueError``).
- Mamba's and Falcon-Mamba's selective scan starts every prefill chunk from a zero state
  (:mod:`hf_neuron.transformers.models.mamba`, :mod:`hf_neuron.transformers.models.falcon_mamba`).
  Mamba-2's scan takes the cached state (``initial_states``) and needs no fix.

With the three closed (and the cache states allocated ahead by ``static-cache-allocate-every-layer``),
generation compiles one prefill-chunk graph and one decode graph per batch size, with the tokens of
an unchunked CPU generation.
"""

from __future__ import annotations

import types

import torch

from hf_neuron.patching import fix, original, wrap
from hf_neuron.transformers.generation.steps import cache_keyword, generation_cache, generation_probe, recurrent_only

INIT_SHAPE_FIX = "static-cache-recurrent-only"
PREFILL_FIX = "generate-chunked-prefill-recurrent-cache"

GENERATION_MODULE = "transformers.generation.utils"


def _config_caches_recurrent_state_only(config) -> bool:
    from transformers import StaticCache

    try:
        return recurrent_only(StaticCache(config=config, max_cache_len=1))
    except Exception:  # noqa: BLE001 - a config a static cache cannot be made for is not ours to answer
        return False


def _tiny_mamba_config():
    """A two-layer Mamba config for the probes (configuration only: no modeling code is imported)."""
    from transformers import MambaConfig

    return MambaConfig(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=2, conv_kernel=4,
                       expand=2, time_step_rank=2)


# ----------------------------------------------------------------------------- early allocation


def _no_init_shape_without_attention(original_fn, self, *args, **kwargs):
    if _config_caches_recurrent_state_only(self.config.get_text_config(decoder=True)):
        return None  # no key/value layer to allocate; the recurrent states are sized by their modules
    return original_fn(self, *args, **kwargs)


def _init_shape_asks_for_attention_heads() -> bool:
    from transformers.generation.utils import GenerationMixin

    config = _tiny_mamba_config()
    if not _config_caches_recurrent_state_only(config):
        raise RuntimeError("a static cache for a Mamba config has key/value layers: the probe no longer applies")
    probe = types.SimpleNamespace(config=config)
    try:
        shape = original(GenerationMixin, "_get_static_cache_init_shape")(probe)
    except AttributeError:
        return True
    return shape is not None


@fix(INIT_SHAPE_FIX, "transformers", _init_shape_asks_for_attention_heads, waits_for=GENERATION_MODULE,
     layer_kind="recurrent")
def patch_recurrent_only_init_shape() -> None:
    """A chunked prefill's static cache cannot be made for a state-space model (Mamba, Mamba-2).

    Gap: generate allocates the static cache of a chunked prefill ahead from the config's key/value
    head count and head size, read from ``num_attention_heads``; a cache of recurrent layers only has
    no such layer and its config no such field (``AttributeError``). Detected by asking upstream's
    ``_get_static_cache_init_shape`` for a tiny Mamba config. Patch: for a config whose static cache
    holds recurrent layers only, there is no key/value shape (``None``); the recurrent states are
    then allocated ahead by ``static-cache-allocate-every-layer``.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(INIT_SHAPE_FIX, GenerationMixin, "_get_static_cache_init_shape", _no_init_shape_without_attention)


# ----------------------------------------------------------------------------- chunked prefill

# A plain module global (as the prefill-mask flag in :mod:`.generation`): set around generate's
# prefill, read by the cache's length and the input preparation, both outside the compiled forward.
_recurrent_prefill_active = False


def recurrent_prefill_active() -> bool:
    """Whether a chunked prefill of a recurrent-only cache is running in this process."""
    return _recurrent_prefill_active


def _prefill_of_recurrent_cache(original_fn, self, input_ids, generation_config, model_kwargs, *args, **kwargs):
    global _recurrent_prefill_active
    if generation_config.prefill_chunk_size is None or not recurrent_only(generation_cache(model_kwargs)):
        return original_fn(self, input_ids, generation_config, model_kwargs, *args, **kwargs)
    previous = _recurrent_prefill_active
    _recurrent_prefill_active = True
    try:
        return original_fn(self, input_ids, generation_config, model_kwargs, *args, **kwargs)
    finally:
        _recurrent_prefill_active = previous


def _length_of_recurrent_cache_in_prefill(original_fn, self, *args, **kwargs):
    if _recurrent_prefill_active and recurrent_only(self):
        # What the unchunked prefill assumes of such a cache: the prompt is all new tokens.
        return 0
    return original_fn(self, *args, **kwargs)


def _chunk_mask_for_recurrent_cache(original_fn, self, input_ids, *args, **kwargs):
    model_inputs = original_fn(self, input_ids, *args, **kwargs)
    if not _recurrent_prefill_active or not recurrent_only(generation_cache(model_inputs)):
        return model_inputs
    mask, ids = model_inputs.get("attention_mask"), model_inputs.get("input_ids")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and isinstance(ids, torch.Tensor) \
            and mask.shape[-1] > ids.shape[-1]:
        # A dense copy: a view's strides would follow the prompt length (and Dynamo's guards with them).
        model_inputs["attention_mask"] = mask[:, -ids.shape[-1]:].clone(memory_format=torch.contiguous_format)
    return model_inputs


def _recurrent_cache_refuses_its_length() -> bool:
    """Whether a static cache of recurrent layers only refuses its length (``ValueError``), as before
    Transformers 5.25; later releases count the tokens its layers have seen."""
    from transformers import StaticCache
    from transformers.cache_utils import Cache

    try:
        original(Cache, "get_seq_length")(StaticCache(config=_tiny_mamba_config(), max_cache_len=16))
    except ValueError:
        return True
    return False


def _chunked_prefill_refuses_recurrent_cache() -> bool:
    from transformers import GenerationConfig, StaticCache
    from transformers.generation.utils import GenerationMixin

    seen = []

    def forward(input_ids, kwargs):
        mask = kwargs.get("attention_mask")
        seen.append((input_ids.shape[-1], None if mask is None else mask.shape[-1]))

    probe = generation_probe(
        _tiny_mamba_config(),
        forward=forward,
        prepare_inputs_for_generation=original(GenerationMixin, "prepare_inputs_for_generation"),
        _valid_auto_compile_criteria=lambda self, model_kwargs, generation_config: False,
    )
    cache = StaticCache(config=_tiny_mamba_config(), max_cache_len=16)
    if not recurrent_only(cache):
        raise RuntimeError("a static cache for a Mamba config has key/value layers: the probe no longer applies")
    generation_config = GenerationConfig(prefill_chunk_size=4, max_length=12)
    model_kwargs = {cache_keyword(): cache, "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    try:
        original(GenerationMixin, "_prefill")(probe, torch.ones(1, 8, dtype=torch.long), generation_config,
                                              model_kwargs)
    except ValueError:
        return True
    return any(width is not None and width != tokens for tokens, width in seen)


@fix(PREFILL_FIX, "transformers", _chunked_prefill_refuses_recurrent_cache, waits_for=GENERATION_MODULE,
     layer_kind="recurrent")
def patch_chunked_prefill_of_recurrent_cache() -> None:
    """Generate's chunked prefill of a cache of recurrent layers only (Mamba, Mamba-2) fails, or
    compiles one graph per chunk.

    Gap: the chunk loop gives each chunk the attention mask up to the chunk's end, while Mamba and
    Falcon-Mamba multiply a mask as wide as the chunk into their hidden states (a shape error) and
    Mamba-2 slices it inside its forward (one compiled graph per mask width); before Transformers 5.25
    the loop also asks the cache for the length it holds, which a cache without attention layers
    refuses (``ValueError``). Detected by running upstream ``_prefill`` on a probe with a tiny Mamba
    static cache. Patch: each chunk of such a cache gets the mask columns of its own tokens and, where
    the cache refuses its length, that length reads 0 during the prefill (what the unchunked prefill
    assumes: the prompt is new tokens).
    """
    from transformers.cache_utils import Cache
    from transformers.generation.utils import GenerationMixin

    wrap(PREFILL_FIX, GenerationMixin, "_prefill", _prefill_of_recurrent_cache)
    wrap(PREFILL_FIX, GenerationMixin, "prepare_inputs_for_generation", _chunk_mask_for_recurrent_cache)
    if _recurrent_cache_refuses_its_length():
        wrap(PREFILL_FIX, Cache, "get_seq_length", _length_of_recurrent_cache_in_prefill)
