"""Static caches with every layer's state allocated before generation's first compiled forward.

Generation with chunked prefill (hf_neuron's Neuron default) compiles the prefill, so Transformers
allocates ("early-initialises") the static cache before the first forward, so that the first chunk
and the next ones are the same graph. It can only do that for key/value layers whose shape it
derives from the config, ``(num_key_value_heads, head_dim)``. Two families fall outside it:

- linear-attention and state-space layers (Qwen3.5 / Qwen3-Next gated delta net, Mamba in Jamba,
  Granite 4, Nemotron-H, LFM2 short convolutions, Kimi Linear, Bailing hybrid) keep convolution and
  recurrent states whose shapes only their module knows; Transformers never allocates them ahead
  (``supports_early_init = False``). They also keep a Python flag per state, "has a previous
  state", that selects the no-state path in the first chunk and is set inside it.
- latent attention (DeepSeek V2 / V3 / V3.2, GLM-4 MoE Lite, GLM MoE DSA, Mistral 4, MiniCPM3,
  Hunyuan V4) caches keys and values of different sizes (a compressed latent and a rope key) plus,
  for sparse attention, an indexer key cache; Transformers returns no init shape for them.

Their first prefill chunk allocates the cache inside the compiled graph and flips the flags Dynamo
guards on, so generate compiles a graph for the first chunk, another for the next chunks, and
decode again (measured on tiny models: 3 graphs per batch size for latent attention, 6 for hybrid
linear attention, where hf_neuron promises 2).

The patch measures what the first forward would allocate by running it on fake tensors
(``FakeTensorMode``: shapes and dtypes only, no memory, no kernel), allocates those states as zeros
on the model's device, and marks each linear-attention state as a previous state: a zero
convolution window and a zero recurrent state are exactly what the no-state path starts from (it
pads the convolution with zeros and starts the recurrence from zero). Every chunk then takes the
same path, and the prefill and decode graphs are the only two.

A second fix here, ``static-cache-early-init-shapes-measured``, covers key/value layers that
Transformers *does* allocate ahead, but from the config alone, while the attention module writes
other shapes: MiMo-V2-Flash's sliding-window layers have twice the configured key/value heads, and
its values a smaller head size (``v_head_dim``) than its keys. The first cache write then fails
(``Sizes of tensors must match``). The same fake forward measures what each layer writes, and a
layer allocated with other shapes is allocated again with the measured ones.
"""

from __future__ import annotations

import copy
import logging
import types

import torch

from hf_neuron.patching import fix, original, wrap
from hf_neuron.transformers.generation.steps import cache_keyword, generation_step_inputs
from hf_neuron.transformers.models.qwen4_exp import POSITION_HISTORY

FIX_NAME = "static-cache-allocate-every-layer"
SHAPES_FIX_NAME = "static-cache-early-init-shapes-measured"

logger = logging.getLogger(__name__)

_KV_NAMES = ("keys", "values")
_INDEXER_NAME = "indexer_keys"


def _linear_state_dicts(layer) -> tuple[dict, dict] | None:
    conv = getattr(layer, "conv_states", None)
    recurrent = getattr(layer, "recurrent_states", None)
    if isinstance(conv, dict) and isinstance(recurrent, dict):
        return conv, recurrent
    return None


def _has_kv_part(layer) -> bool:
    from transformers.cache_utils import CacheLayerMixin

    return isinstance(layer, CacheLayerMixin)


#: Marks a cache layer the model's first forward does not write (RecurrentGemma keeps its recurrent
#: states on its modules, not in its cache's recurrent layers): there is nothing to wait for.
_UNWRITTEN = "_hf_neuron_unwritten_by_the_forward"


def unallocated_layers(cache) -> list[int]:
    """Indices of the cache layers that still wait for their first forward to allocate state."""
    pending = []
    for index, layer in enumerate(getattr(cache, "layers", ())):
        if vars(layer).get(_UNWRITTEN):
            continue
        linear = _linear_state_dicts(layer)
        if linear is not None and not any(v is not None for states in linear for v in states.values()):
            pending.append(index)
        elif _has_kv_part(layer) and not (layer.is_initialized and getattr(layer, "is_indexer_initialized", True)):
            pending.append(index)
    return pending


def _copy_for_probe(cache, fake_mode):
    """A copy of ``cache`` whose tensors are fakes of the real ones: what the fake forward writes
    (states, lengths) stays in the copy."""

    def fake(value):
        if isinstance(value, torch.Tensor):
            return fake_mode.from_tensor(value)
        if isinstance(value, dict):
            return {key: fake(item) for key, item in value.items()}
        return value

    probe = copy.copy(cache)
    layers = []
    for layer in cache.layers:
        twin = copy.copy(layer)
        for name, value in vars(layer).items():
            setattr(twin, name, fake(value))
        layers.append(twin)
    probe.layers = layers
    return probe


def _module_tensors(model) -> list[tuple[torch.nn.Module, dict]]:
    """Each module's tensor attributes and buffers (references, no copies)."""
    saved = []
    for module in model.modules():
        plain = {name: value for name, value in vars(module).items() if isinstance(value, torch.Tensor)}
        saved.append((module, {"plain": plain, "buffers": dict(module._buffers)}))
    return saved


def _restore_module_tensors(model, saved) -> None:
    """Undo what a forward stored on the model (a lazily built table would otherwise stay a fake tensor)."""
    from torch._subclasses.fake_tensor import FakeTensor

    for module, before in saved:
        for name, value in list(vars(module).items()):
            if isinstance(value, FakeTensor):
                if name in before["plain"]:
                    setattr(module, name, before["plain"][name])
                else:
                    delattr(module, name)
        for name, value in list(module._buffers.items()):
            if isinstance(value, FakeTensor):
                module._buffers[name] = before["buffers"].get(name)


class _GroupedMatmulAnyDtype(torch.overrides.TorchFunctionMode):
    """Lets grouped matmuls of any dtype through the fake forward (shapes only).

    Mixture-of-experts layers call ``torch._grouped_mm`` in eager mode, whose shape function only
    accepts bfloat16; a compiled forward takes Transformers' own fallback instead. Only shapes are
    measured here, so the call is made in bfloat16 and its result cast back.
    """

    # Looked up once: the mode sees every op of the forward.
    _GROUPED = frozenset(f for f in (getattr(torch, "_grouped_mm", None),
                                     getattr(torch.nn.functional, "grouped_mm", None)) if f is not None)

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._GROUPED and len(args) >= 2 and args[0].dtype != torch.bfloat16:
            dtype = args[0].dtype
            out = func(args[0].to(torch.bfloat16), args[1].to(torch.bfloat16), *args[2:], **kwargs)
            return out.to(dtype)
        return func(*args, **kwargs)


def measure_first_forward_states(model, cache, batch_size: int, seq_len: int) -> dict[int, dict]:
    """What the first forward of ``seq_len`` tokens allocates in each pending layer of ``cache``.

    Returns ``{layer index: {"kv": (key like, value like), "indexer": like, "position_history": like,
    "conv": {state: like}, "recurrent": {state: like}}}`` where each ``like`` is a ``(shape, dtype)``
    pair (a layer the forward does not write gets no entry of its own). ``cache`` is not modified.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    pending = unallocated_layers(cache)
    device = model.device

    def plain_inputs():
        ids = torch.zeros((batch_size, seq_len), dtype=torch.long, device=device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": True}

    def first_forward(inputs=None):
        saved = _module_tensors(model)
        try:
            with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True) as fake_mode, _GroupedMatmulAnyDtype():
                probe = _copy_for_probe(cache, fake_mode)
                model(**{**(inputs or plain_inputs()), cache_keyword(): probe})
        finally:
            _restore_module_tensors(model, saved)
        return probe

    try:
        probe = first_forward()
    except Exception:  # noqa: BLE001 - retried below with the masks generate builds
        # A forward that builds its masks from the 2D mask inside may read the cache's length as a
        # value (Inkling): give it the masks generate passes instead, built outside the forward.
        probe = first_forward(generation_step_inputs(model, {**plain_inputs(), cache_keyword(): cache}, first=True))

    def like(tensor):
        return (tuple(tensor.shape), tensor.dtype) if isinstance(tensor, torch.Tensor) else None

    measured = {}
    for index in pending:
        layer = probe.layers[index]
        states = {}
        before = cache.layers[index]
        if _has_kv_part(layer) and layer.is_initialized and not before.is_initialized:
            states["kv"] = tuple(like(getattr(layer, name)) for name in _KV_NAMES)
        indexer = getattr(layer, _INDEXER_NAME, None)
        if indexer is not None and getattr(before, _INDEXER_NAME, None) is None:
            states["indexer"] = like(indexer)
        history = vars(layer).get(POSITION_HISTORY)
        if history is not None and vars(before).get(POSITION_HISTORY) is None:
            states["position_history"] = like(history)
        linear = _linear_state_dicts(layer)
        if linear is not None:
            conv, recurrent = linear
            states["conv"] = {i: like(t) for i, t in conv.items() if t is not None}
            states["recurrent"] = {i: like(t) for i, t in recurrent.items() if t is not None}
        measured[index] = states
    return measured


def allocate_measured_states(cache, measured: dict[int, dict], device) -> None:
    """Allocate zero states of the measured shapes in ``cache``, through each layer's own init."""
    for index, states in measured.items():
        layer = cache.layers[index]
        if not any(states.values()):
            vars(layer)[_UNWRITTEN] = True
            continue
        if "kv" in states:
            (key_shape, key_dtype), (value_shape, value_dtype) = states["kv"]
            # Static layers take every dimension but the sequence one from these (as Transformers'
            # own early initialisation does), so an empty sequence dimension allocates nothing extra.
            key = torch.zeros((*key_shape[:-2], 0, key_shape[-1]), dtype=key_dtype, device=device)
            value = torch.zeros((*value_shape[:-2], 0, value_shape[-1]), dtype=value_dtype, device=device)
            layer.lazy_initialization(key, value)
        if "indexer" in states:
            shape, dtype = states["indexer"]
            layer.lazy_initialization_indexer(torch.zeros((*shape[:-2], 0, shape[-1]), dtype=dtype, device=device))
        if "position_history" in states:
            shape, dtype = states["position_history"]
            vars(layer)[POSITION_HISTORY] = torch.zeros(shape, dtype=dtype, device=device)
            torch._dynamo.mark_static_address(vars(layer)[POSITION_HISTORY])
        for state_idx, (shape, dtype) in states.get("conv", {}).items():
            layer.lazy_initialization(conv_states=torch.zeros(shape, dtype=dtype, device=device),
                                      state_idx=state_idx, conv_kernel_size=shape[-1])
        for state_idx, (shape, dtype) in states.get("recurrent", {}).items():
            layer.lazy_initialization(recurrent_states=torch.zeros(shape, dtype=dtype, device=device),
                                      state_idx=state_idx)
        _token_count_with_the_states(layer, device)
        mark_zero_states_as_previous(layer)


def _token_count_with_the_states(layer, device) -> None:
    """A linear-attention layer's token count (``cumulative_length_linear``, Transformers 5.25 and later)
    on the device of its states. Upstream moves it there when it allocates a convolution state; a
    layer with a recurrent state only (MiniMax's lightning attention) would keep it on the CPU, a
    host tensor inside every compiled step."""
    count = vars(layer).get("cumulative_length_linear")
    if isinstance(count, torch.Tensor) and count.device != torch.device(device):
        layer.cumulative_length_linear = count.to(device)
        torch._dynamo.mark_static_address(layer.cumulative_length_linear)


def mark_zero_states_as_previous(layer) -> None:
    """A linear-attention layer whose allocated states are zeros continues from them (see module doc)."""
    linear = _linear_state_dicts(layer)
    flags = getattr(layer, "has_previous_state", None)
    if linear is None or not isinstance(flags, dict):
        return
    conv, recurrent = linear
    for state_idx in flags:
        if conv.get(state_idx) is not None or recurrent.get(state_idx) is not None:
            flags[state_idx] = True


def measured_chunk(prefill_chunk_size) -> int | None:
    """The chunk length a fake first forward measures with: ``prefill_chunk_size``, or the smallest of
    its prefill buckets when it is a list (every bucket allocates the same cache states)."""
    if prefill_chunk_size is None or isinstance(prefill_chunk_size, int):
        return prefill_chunk_size
    from hf_neuron.transformers.generation.prefill_schedule import prefill_buckets

    return prefill_buckets(prefill_chunk_size)[0]


def _measurable_ahead(model, prefill_chunk_size) -> bool:
    """Whether generate's cache for ``model`` can be measured on a fake forward before the first one.

    Upstream allocates ahead only for a compiled (chunked) prefill of a decoder. A tensor-parallel model
    runs collectives in its forward; on fake tensors they neither communicate nor wait for the other
    ranks (the c10d ops have shape-only kernels), so each rank measures the shapes of its own shard.
    A model spread over several devices (a ``device_map`` of more than one) is left to upstream.
    """
    return (prefill_chunk_size is not None and not model.config.is_encoder_decoder
            and len(set(getattr(model, "hf_device_map", {"": 0}).values())) <= 1)


def _allocate_every_layer(original, self, cache_implementation, batch_size, max_cache_len, prefill_chunk_size,
                          model_kwargs, *args, **kwargs):
    cache = original(self, cache_implementation, batch_size, max_cache_len, prefill_chunk_size, model_kwargs,
                     *args, **kwargs)
    prefill_chunk_size = measured_chunk(prefill_chunk_size)
    pending = unallocated_layers(cache)
    if not pending or not _measurable_ahead(self, prefill_chunk_size):
        return cache
    # Measured once per cache layout: every generate call prepares a new cache of the same shapes.
    key = (batch_size, cache.get_max_length(), prefill_chunk_size, self.dtype, str(self.device), tuple(pending))
    memo = self.__dict__.setdefault("_hf_neuron_cache_states", {})
    if key not in memo:
        try:
            memo[key] = measure_first_forward_states(self, cache, batch_size, prefill_chunk_size)
        except Exception as exc:  # noqa: BLE001 - a model the fake forward cannot run keeps lazy allocation
            memo[key] = None
            _warn_lazy(type(self).__name__, exc)
    if memo[key] is not None:
        allocate_measured_states(cache, memo[key], self.device)
    return cache


_warned: set[str] = set()


def _warn_lazy(class_name: str, exc: BaseException) -> None:
    if class_name in _warned:
        return
    _warned.add(class_name)
    logger.warning(
        "hf_neuron: could not measure the cache states of %s ahead of generation (%s: %s); its cache is "
        "allocated by the first prefill chunk, which compiles one or two extra graphs per batch size. "
        "Set HF_NEURON_DISABLE=%s to silence this.", class_name, type(exc).__name__, str(exc)[:200], FIX_NAME)


def _probe_config():
    """Tiny configs of the two layer kinds generate does not allocate ahead (short convolution, latent attention)."""
    from transformers import DeepseekV3Config, Lfm2Config

    conv = Lfm2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, layer_types=["conv", "full_attention"])
    latent = DeepseekV3Config(vocab_size=32, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                              kv_lora_rank=8, q_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4,
                              v_head_dim=4, first_k_dense_replace=1)
    return conv, latent


def _generate_leaves_layers_unallocated() -> bool:
    from transformers.generation.utils import GenerationMixin

    prepare = original(GenerationMixin, "_prepare_static_cache")  # upstream's, also once patched
    for config in _probe_config():
        probe = types.SimpleNamespace(config=config, dtype=torch.float32, device=torch.device("cpu"))
        probe._get_static_cache_init_shape = types.MethodType(GenerationMixin._get_static_cache_init_shape, probe)
        cache = prepare(probe, "static", batch_size=1, max_cache_len=8, prefill_chunk_size=4, model_kwargs={})
        if unallocated_layers(cache):
            return True
    return False


@fix(FIX_NAME, "transformers", _generate_leaves_layers_unallocated, waits_for="transformers.generation.utils")
def patch_allocate_every_layer() -> None:
    """Generate's static cache leaves linear-attention and latent-attention layers to the first
    compiled prefill chunk, which then compiles separate first-chunk graphs (3 to 6 graphs per batch
    size where 2 are promised).

    Detected by preparing generate's static cache for a chunked prefill of a tiny short-convolution
    (LFM2) and a tiny latent-attention (DeepSeek V3) config and finding layers without state.
    Patch: after the cache is prepared, the first forward's allocations are measured on fake
    tensors and made ahead as zeros; linear-attention states count as previous states (see the
    module docstring).
    """
    from transformers.generation.utils import GenerationMixin

    wrap(FIX_NAME, GenerationMixin, "_prepare_static_cache", _allocate_every_layer)


# ------------------------------------------------------------ early-initialised shapes, measured


def _kv_layout(layer) -> tuple | None:
    """``(key shape, value shape)`` of an allocated key/value layer, else None."""
    if not _has_kv_part(layer) or not layer.is_initialized:
        return None
    keys, values = (getattr(layer, name, None) for name in _KV_NAMES)
    if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
        return None
    return tuple(keys.shape), tuple(values.shape)


def _without_kv_allocation(cache, indices):
    """A shallow twin of ``cache`` whose key/value layers at ``indices`` wait for their first write."""
    twin = copy.copy(cache)
    twin.layers = list(cache.layers)
    for index in indices:
        layer = copy.copy(cache.layers[index])
        layer.is_initialized = False
        for name in _KV_NAMES:
            layer.__dict__.pop(name, None)
        twin.layers[index] = layer
    return twin


def misallocated_layers(model, cache, batch_size: int, seq_len: int) -> dict[int, dict]:
    """The allocated key/value layers of ``cache`` whose shapes differ from what the first forward of
    ``seq_len`` tokens writes, with the measured states (as :func:`measure_first_forward_states`)."""
    allocated = {index: layout for index, layer in enumerate(cache.layers)
                 if (layout := _kv_layout(layer)) is not None}
    if not allocated:
        return {}
    measured = measure_first_forward_states(model, _without_kv_allocation(cache, allocated), batch_size, seq_len)
    wrong = {}
    for index, (key_shape, value_shape) in allocated.items():
        states = measured.get(index, {}).get("kv")
        if states is None:
            continue
        (written_key, _), (written_value, _) = states
        # Every dimension but the sequence one, which the cache sets to its own length.
        if (key_shape[:-2], key_shape[-1]) != (written_key[:-2], written_key[-1]) or \
                (value_shape[:-2], value_shape[-1]) != (written_value[:-2], written_value[-1]):
            wrong[index] = {"kv": states}
    return wrong


def _reallocate_misallocated(original, self, cache_implementation, batch_size, max_cache_len, prefill_chunk_size,
                             model_kwargs, *args, **kwargs):
    cache = original(self, cache_implementation, batch_size, max_cache_len, prefill_chunk_size, model_kwargs,
                     *args, **kwargs)
    prefill_chunk_size = measured_chunk(prefill_chunk_size)
    if not _measurable_ahead(self, prefill_chunk_size):
        return cache
    key = (batch_size, cache.get_max_length(), prefill_chunk_size, self.dtype, str(self.device))
    memo = self.__dict__.setdefault("_hf_neuron_cache_layouts", {})
    if key not in memo:
        try:
            memo[key] = misallocated_layers(self, cache, batch_size, prefill_chunk_size)
        except Exception:  # noqa: BLE001 - a model the fake forward cannot run keeps upstream's shapes
            memo[key] = {}
    for index in memo[key]:
        cache.layers[index].is_initialized = False
    allocate_measured_states(cache, memo[key], self.device)
    return cache


MIMO_MODULE = "transformers.models.mimo_v2_flash.modeling_mimo_v2_flash"


def _tiny_mimo_v2_flash():
    from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import MiMoV2FlashConfig, MiMoV2FlashForCausalLM

    config = MiMoV2FlashConfig(vocab_size=32, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=8,
                               v_head_dim=4, layer_types=["full_attention", "sliding_attention"],
                               mlp_layer_types=["dense", "dense"], sliding_window=4)
    torch.manual_seed(0)
    return MiMoV2FlashForCausalLM(config).eval()


def _early_init_shapes_differ_from_writes() -> bool:
    from transformers.generation.utils import GenerationMixin

    model = _tiny_mimo_v2_flash()

    prepare = original(GenerationMixin, "_prepare_static_cache")  # upstream's, also once patched
    cache = prepare(model, "static", batch_size=1, max_cache_len=8, prefill_chunk_size=4, model_kwargs={})
    if not any(_kv_layout(layer) is not None for layer in cache.layers):
        raise RuntimeError("generate no longer allocates a chunked-prefill static cache ahead of the first forward")
    return bool(misallocated_layers(model, cache, batch_size=1, seq_len=4))


# Decided when MiMo-V2-Flash's modeling module is imported: the only architecture known to write
# other shapes than its config says (its tiny model is the detector's probe).
@fix(SHAPES_FIX_NAME, "transformers", _early_init_shapes_differ_from_writes, waits_for=MIMO_MODULE,
     model_types=("mimo_v2_flash",))
def patch_measure_early_init_shapes() -> None:
    """Generate allocates a chunked prefill's static cache from the config's key/value heads and head
    size, but MiMo-V2-Flash's sliding layers write twice the heads and values of a smaller head size:
    its first compiled prefill chunk fails (``Sizes of tensors must match``).

    Detected by preparing generate's static cache for a tiny MiMo-V2-Flash and measuring, on fake
    tensors, what its first forward writes. Patch: a layer allocated with other shapes than its
    first forward writes is allocated again with the measured shapes (measured once per cache layout).
    """
    from transformers.generation.utils import GenerationMixin

    wrap(SHAPES_FIX_NAME, GenerationMixin, "_prepare_static_cache", _reallocate_misallocated)
