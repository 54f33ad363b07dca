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
- ``mamba-chunk-scan-initial-state`` (and the Falcon-Mamba twin): the full-sequence selective scan of
  Mamba starts from a zero state, so every prefill chunk after the first forgets what the chunks
  before it left in the cache. Mamba-2's scan takes the cached state (``initial_states``) and needs
  no fix.

With the three closed (and the cache states allocated ahead by ``static-cache-allocate-every-layer``),
generation compiles one prefill-chunk graph and one decode graph per batch size, with the tokens of
an unchunked CPU generation.
"""

from __future__ import annotations

import types

import torch

from hf_neuron.patching import fix, original, wrap

INIT_SHAPE_FIX = "static-cache-recurrent-only"
PREFILL_FIX = "generate-chunked-prefill-recurrent-cache"
MAMBA_SCAN_FIX = "mamba-chunk-scan-initial-state"
FALCON_MAMBA_SCAN_FIX = "falcon-mamba-chunk-scan-initial-state"

GENERATION_MODULE = "transformers.generation.utils"
MAMBA_MODULE = "transformers.models.mamba.modeling_mamba"
FALCON_MAMBA_MODULE = "transformers.models.falcon_mamba.modeling_falcon_mamba"


def recurrent_only(cache) -> bool:
    """Whether every layer of ``cache`` is recurrent state (no layer with keys and values)."""
    flags = getattr(cache, "is_linear", None)
    try:
        return bool(flags) and all(flags)
    except TypeError:
        return False


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


@fix(INIT_SHAPE_FIX, "transformers", _init_shape_asks_for_attention_heads, waits_for=GENERATION_MODULE)
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
    from hf_neuron.transformers.generation import generation_cache

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
    from hf_neuron.transformers.generation import generation_cache

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

    from hf_neuron.transformers.generation import cache_keyword, generation_cache

    seen = []
    prepare = original(GenerationMixin, "prepare_inputs_for_generation")

    class _Probe(GenerationMixin):
        config = _tiny_mamba_config()
        device = torch.device("cpu")
        dtype = torch.float32

        def is_remote_code(self):
            return False

        def prepare_inputs_for_generation(self, *args, **kwargs):
            return prepare(self, *args, **kwargs)

        def _valid_auto_compile_criteria(self, model_kwargs, generation_config):
            return False

        def __call__(self, input_ids=None, attention_mask=None, **kwargs):
            seen.append((input_ids.shape[-1], None if attention_mask is None else attention_mask.shape[-1]))
            cache = generation_cache(kwargs)
            return types.SimpleNamespace(cache=cache, past_key_values=cache)

    cache = StaticCache(config=_tiny_mamba_config(), max_cache_len=16)
    if not recurrent_only(cache):
        raise RuntimeError("a static cache for a Mamba config has key/value layers: the probe no longer applies")
    generation_config = GenerationConfig(prefill_chunk_size=4, max_length=12)
    model_kwargs = {cache_keyword(): cache, "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    try:
        original(GenerationMixin, "_prefill")(_Probe(), torch.ones(1, 8, dtype=torch.long), generation_config,
                                              model_kwargs)
    except ValueError:
        return True
    return any(width is not None and width != tokens for tokens, width in seen)


@fix(PREFILL_FIX, "transformers", _chunked_prefill_refuses_recurrent_cache, waits_for=GENERATION_MODULE)
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


# ----------------------------------------------------------------------------- Mamba's scan

# The cached recurrent state the running mixer's full-sequence scan continues from (None: from zero).
# A plain global, set and read inside the compiled forward: Dynamo tracks the store.
_scan_initial_state = None


def _mixer_forward_passing_state(original_fn, self, hidden_states, *args, **kwargs):
    global _scan_initial_state
    cache = kwargs.get("cache", args[0] if args else None)
    state = None
    if cache is not None and hidden_states.shape[1] > 1:
        state = cache.get_recurrent_state(self.layer_idx, state_idx=0)
    previous = _scan_initial_state
    _scan_initial_state = state
    try:
        return original_fn(self, hidden_states, *args, **kwargs)
    finally:
        _scan_initial_state = previous


def _scan_from_cached_state(original_fn, hidden_states, dt, A, B, C, *args, **kwargs):
    """Upstream's scan from a zero state, plus what the cached state ``h0`` adds.

    The recurrence ``h_t = a_t * h_{t-1} + b_t`` is linear, so from ``h0`` it is the zero-start
    result plus ``P_t * h0`` with ``P_t = a_1 * ... * a_t = exp(A * cumsum(dt))``: each output gains
    ``C_t . (P_t * h0)`` (gated like the rest, by ``silu(z)``) and the final state ``P_L * h0``.
    """
    initial = _scan_initial_state
    result = original_fn(hidden_states, dt, A, B, C, *args, **kwargs)
    if initial is None:
        return result
    names = ("D", "z", "delta_bias", "delta_softplus", "return_last_state")
    options = dict(zip(names, args))
    options.update({name: kwargs[name] for name in names if name in kwargs})
    z, delta_bias = options.get("z"), options.get("delta_bias")
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if options.get("delta_softplus", False):
        dt = torch.nn.functional.softplus(dt)
    # (batch, channels, time, state): the decay from the start of the chunk to each step.
    decay = torch.exp(A[None, :, None, :] * torch.cumsum(dt.float(), dim=-1)[..., None])
    carried = decay * initial.float()[:, :, None, :]
    added = (carried * C.float().transpose(1, 2)[:, None, :, :]).sum(-1)
    if z is not None:
        added = added * torch.nn.functional.silu(z.float())
    if options.get("return_last_state", False):
        output, state = result
        return output + added.to(output.dtype), state + carried[:, :, -1].to(state.dtype)
    return result + added.to(result.dtype)


def _scan_forgets_cached_state(module_name: str, config_name: str, model_name: str) -> bool:
    """Whether upstream's model, prefilled in two chunks through a cache, differs from one pass."""
    import importlib

    import transformers
    from transformers import DynamicCache

    from hf_neuron.patching import upstream_behaviour
    from hf_neuron.transformers.generation import cache_keyword

    fix_name = MAMBA_SCAN_FIX if module_name == MAMBA_MODULE else FALCON_MAMBA_SCAN_FIX
    module = importlib.import_module(module_name)
    config = getattr(transformers, config_name)(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1,
                                                conv_kernel=4, expand=2, time_step_rank=2)
    torch.manual_seed(0)
    model = getattr(module, model_name)(config).eval()
    with torch.no_grad():  # default init keeps the states near zero (1e-4): make the state matter
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2:
                parameter.normal_(std=0.5)
    ids = torch.randint(0, 32, (1, 8))
    with torch.no_grad(), upstream_behaviour(fix_name):
        whole = model(input_ids=ids).logits[:, -1]
        cache = DynamicCache(config=config)
        model(input_ids=ids[:, :4], use_cache=True, **{cache_keyword(): cache})
        chunked = model(input_ids=ids[:, 4:], use_cache=True, **{cache_keyword(): cache}).logits[:, -1]
    return not torch.allclose(whole, chunked, atol=1e-5, rtol=1e-4)


def _patch_scan(name: str, module_name: str, mixer_name: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    wrap(name, getattr(module, mixer_name), "forward", _mixer_forward_passing_state)
    wrap(name, module, "mamba_selective_scan", _scan_from_cached_state)


@fix(MAMBA_SCAN_FIX, "transformers",
     lambda: _scan_forgets_cached_state(MAMBA_MODULE, "MambaConfig", "MambaForCausalLM"), waits_for=MAMBA_MODULE)
def patch_mamba_scan_initial_state() -> None:
    """Mamba's prefill chunks after the first start from a zero state: chunked generation is wrong.

    Gap: the full-sequence selective scan (any prompt longer than one token) starts its recurrence
    from zero instead of the state the cache holds, so a chunked prefill forgets every chunk but
    the last (logits off by about 0.1 on a tiny model). Detected by prefilling a tiny Mamba in two
    chunks through a cache and comparing with one pass. Patch: the mixer hands its cached state to
    the scan, which adds that state's contribution (see ``_scan_from_cached_state``).
    """
    _patch_scan(MAMBA_SCAN_FIX, MAMBA_MODULE, "MambaMixer")


@fix(FALCON_MAMBA_SCAN_FIX, "transformers",
     lambda: _scan_forgets_cached_state(FALCON_MAMBA_MODULE, "FalconMambaConfig", "FalconMambaForCausalLM"),
     waits_for=FALCON_MAMBA_MODULE)
def patch_falcon_mamba_scan_initial_state() -> None:
    """Falcon-Mamba's prefill chunks after the first start from a zero state: chunked generation is wrong.

    Gap, detection and patch as ``mamba-chunk-scan-initial-state``, for Falcon-Mamba's own copy of
    the mixer and the scan.
    """
    _patch_scan(FALCON_MAMBA_SCAN_FIX, FALCON_MAMBA_MODULE, "FalconMambaMixer")
