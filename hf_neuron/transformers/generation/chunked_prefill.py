"""Chunked prefill in fixed shapes: every prompt that fits the cache reuses the prefill-bucket graphs.

On Trainium every distinct graph is a neuronx-cc compile of minutes. Upstream's chunked prefill
(``prefill_chunk_size`` with a static cache) gets close to one graph per chunk size; these fixes close
the gaps that make it compile more:

- ``generate-prefill-chunk-strides``: prefill chunks of ``position_ids`` are views of the whole
  prompt's tensor, so their stride (and Dynamo's guard) changes with the prompt length.
- ``generate-compiled-prefill-mask``: the first chunk may get no mask (SDPA ``is_causal`` skip)
  and the next ones a mask tensor: two prefill graphs.
- ``generate-compiled-prefill-recurrent-mask``: hybrid models' linear-attention mask is skipped for
  unpadded prompts only: two prefill graphs.
- ``generate-pad-prompt-to-chunk``: a prompt that is not a multiple of the chunk size ends with a
  shorter chunk: one more graph per distinct remainder. We cut every prompt into chunks of the
  prefill buckets (:mod:`.prefill_schedule`: left padding, or an overlapping last chunk / the decode
  graph near the cache's end). A cache whose layers say that left padding changes the model's results
  (:data:`LEFT_PADDING_CHANGES_RESULTS`: DeepSeek V4's compressors) is never padded: its prompts run
  as whole chunks, then decode steps. Nor is the prompt of a model whose forward takes no
  ``position_ids`` from ``generate`` (the BART family counts positions from the cache's length, so
  padding would shift them): an overlapping last chunk or decode steps instead.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.generation.prefill_schedule import prefill_buckets, schedule_prefill
from hf_neuron.transformers.generation.steps import (
    cache_keyword,
    generate_passes_positions,
    generation_cache,
    generation_probe,
    recurrent_only,
)

GENERATION_MODULE = "transformers.generation.utils"

STRIDES_FIX = "generate-prefill-chunk-strides"
MASK_FIX = "generate-compiled-prefill-mask"
RECURRENT_MASK_FIX = "generate-compiled-prefill-recurrent-mask"
PAD_FIX = "generate-pad-prompt-to-chunk"

#: Set (True) on a cache layer class whose model computes other results for a left-padded prompt
#: (DeepSeek V4's compressors pool padding tokens too): its prompts are never padded to a bucket.
LEFT_PADDING_CHANGES_RESULTS = "_hf_neuron_left_padding_changes_results"
#: Set (True) on a cache class of recurrent layers only whose ``get_seq_length`` counts the tokens run
#: through it (RWKV's state cache): its prefill can resume after them, as a key/value cache's does.
COUNTS_PREFILLED_TOKENS = "_hf_neuron_counts_prefilled_tokens"


def probe_config():
    """A one-layer Llama config for the probes (configuration only: no modeling code is imported)."""
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=1, intermediate_size=8, vocab_size=16)


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
        if type(value) is dict:  # per-layer-type masks of hybrid models: {"linear_attention": ..., ...}
            # (a plain dict only: an encoder's output, a ``ModelOutput``, is passed on as it is)
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
    # Chunks of one token (the decode tail of a prompt schedule) run the decode step's graph: they keep
    # the decode step's masks, or a mask function called inside the forward guards on this flag.
    chunk = generation_config.prefill_chunk_size
    compiled = chunk is not None and chunk != 1 and self._valid_auto_compile_criteria(model_kwargs, generation_config)
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
    first chunk of a static cache. Patch: while ``generate`` runs a compiled chunked prefill (in chunks
    longer than one token: one-token chunks run the decode graph), the registered "sdpa" mask function
    always materializes the mask.
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


def _recurrent_mask_materialized_in_compiled_prefill(original, *args, **kwargs):
    mask = original(*args, **kwargs)
    if mask is not None or not _compiled_prefill_active:
        return mask
    names = ("config", "inputs_embeds", "attention_mask")
    given = {**dict(zip(names, args)), **kwargs}
    inputs_embeds, attention_mask = given.get("inputs_embeds"), given.get("attention_mask")
    if attention_mask is None or attention_mask.ndim != 2 or inputs_embeds is None or inputs_embeds.shape[1] == 1:
        return mask
    return attention_mask[:, -inputs_embeds.shape[1]:].contiguous()


def _recurrent_mask_skipped_without_padding() -> bool:
    from transformers.masking_utils import create_recurrent_attention_mask

    mask = create_recurrent_attention_mask(
        config=probe_config(), inputs_embeds=torch.zeros(1, 2, 4), attention_mask=torch.ones(1, 2, dtype=torch.long)
    )
    return mask is None


def _recurrent_mask_entries():
    """``(mapping, key)`` of every entry of Transformers' per-layer-type mask functions that builds the
    recurrent (linear-attention, convolution) padding mask, nested "hybrid" entries included."""
    from transformers import masking_utils

    found, pending = [], [masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING]
    while pending:
        mapping = pending.pop()
        for key, value in mapping.items():
            if isinstance(value, dict):
                pending.append(value)
            elif value is masking_utils.create_recurrent_attention_mask:
                found.append((mapping, key))
    return found


@fix(RECURRENT_MASK_FIX, "transformers", _recurrent_mask_skipped_without_padding, waits_for=GENERATION_MODULE,
     layer_kind="recurrent")
def patch_compiled_prefill_recurrent_mask() -> None:
    """A compiled prefill of a hybrid model gets a linear-attention mask for padded prompts and none otherwise.

    Gap: the padding mask of linear-attention and convolution layers (Qwen3-Next, Qwen3.5, LFM2,
    Granite 4 hybrids...) is skipped when the 2D mask is all ones, outside tracing; ``generate``
    builds the masks outside the compiled forward, so a prompt that needs no padding and one that
    does are two prefill graphs (and a batch mixing lengths is a third input set). Detected by
    asking ``create_recurrent_attention_mask`` for an unpadded two-token prompt. Patch: while
    ``generate`` runs a compiled chunked prefill, the registered recurrent mask function returns the
    chunk's 2D mask even when it is all ones (multiplying by ones changes nothing); single-token
    forwards keep upstream's ``None``, as the decode graph does.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(RECURRENT_MASK_FIX, GenerationMixin, "_prefill", _prefill_flagging_compiled_masks)
    for mapping, key in _recurrent_mask_entries():
        wrap(RECURRENT_MASK_FIX, mapping, key, _recurrent_mask_materialized_in_compiled_prefill, mapping=True)


# ----------------------------------------------------------------------------- prompt padding

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


#: Per-token type ids that are padded with the prompt (multimodal models mark image tokens with them).
_TOKEN_TYPE_KEYS = ("position_ids", "token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids")


def _token_prompt(self, input_ids, model_kwargs) -> bool:
    """A batch of token ids whose every other input survives padding and re-cutting: no raw image or
    audio input (those cannot be split into chunks). Images already encoded by ``generate``
    (``mm_encoder_outputs``) are handed to each chunk by placeholder, so they do."""
    from transformers.generation.utils import MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL

    if self.config.is_encoder_decoder or input_ids.dim() != 2 or model_kwargs.get("inputs_embeds") is not None:
        return False
    raw = [key for key in MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL if key != "mm_encoder_outputs"]
    return not any(_given(model_kwargs.get(key)) for key in raw)


def _schedule_for(self, input_ids, generation_config, model_kwargs, is_first_iteration, buckets):
    """The prompt's :class:`~hf_neuron.transformers.generation.prefill_schedule.PrefillSchedule`, or None when
    this prefill is not a compiled one of a fresh static cache (upstream's prefill then runs)."""
    if not is_first_iteration or not _token_prompt(self, input_ids, model_kwargs):
        return None
    cache = generation_cache(model_kwargs)
    if cache is None or not getattr(cache, "is_compileable", False):
        return None
    # A cache of recurrent layers only keeps no length (unless it says it counts its tokens): its
    # prefill takes the prompt as new tokens in one call (as upstream's unchunked prefill does), so it
    # cannot be resumed from a later position.
    resumable = not recurrent_only(cache) or getattr(cache, COUNTS_PREFILLED_TOKENS, False)
    if resumable and int(cache.get_seq_length()) != 0:
        return None
    if not self._valid_auto_compile_criteria(model_kwargs, generation_config):
        return None
    length = input_ids.shape[1]
    capacity = _full_attention_capacity(cache)
    new_tokens = generation_config.max_length - length
    schedule = schedule_prefill(
        length,
        buckets,
        room=None if capacity is None else capacity - new_tokens + 1,
        can_pad=(generation_config._pad_token_tensor is not None and not _padding_changes_results(cache)
                 and not _padding_moves_positions(self, cache)),
        rewindable=_rewindable(cache),
        one_size=not resumable,
    )
    if schedule.decode_tail and not resumable:
        return None  # no pad token and a length no bucket divides: upstream's prefill (one more graph)
    if _given(model_kwargs.get("mm_encoder_outputs")) and _upstream_calls(schedule) > 1:
        # Upstream numbers a prefill's feature rows from its own first token: a prompt with encoded
        # images is prefilled in one upstream call, or its later calls would take the first rows again.
        return None
    return schedule


def _upstream_calls(schedule) -> int:
    """How many upstream prefill calls :func:`_prefill_on_schedule` makes for `schedule`."""
    sizes = list(schedule.chunks)
    overlapping = [sizes.pop()] if schedule.overlap else []  # the overlapping last chunk is its own call
    calls = sum(1 for i, size in enumerate(sizes) if i == 0 or sizes[i - 1] != size)
    return calls + len(overlapping) + (1 if schedule.decode_tail else 0)


def _padding_changes_results(cache) -> bool:
    return any(getattr(layer, LEFT_PADDING_CHANGES_RESULTS, False) for layer in getattr(cache, "layers", ()))


def _padding_moves_positions(model, cache) -> bool:
    """Left padding would move the prompt's positions: the model's key/value layers take positions
    that ``generate`` does not make from the attention mask (BART-family decoders count them from the
    cache's length). Recurrent-only caches take no positions."""
    return not recurrent_only(cache) and not generate_passes_positions(model)


def _rewindable(cache) -> bool:
    """Whether ``cache.crop`` can take back the newest positions. Layers of recurrent states (linear
    attention) call themselves croppable but can only be cropped while recording every past state,
    which a prefill does not do: a cache holding one is never rewound."""
    return bool(getattr(cache, "is_croppable", False)) and not any(
        hasattr(layer, "record_past") for layer in getattr(cache, "layers", ()))


def _left_pad(input_ids, generation_config, model_kwargs, padding):
    batch, length = input_ids.shape
    attention_mask = model_kwargs["attention_mask"]
    pad_id = generation_config._pad_token_tensor.to(input_ids.device)
    input_ids = torch.cat([pad_id.expand(batch, padding).to(input_ids.dtype), input_ids], dim=-1)
    model_kwargs["attention_mask"] = torch.nn.functional.pad(attention_mask, (padding, 0), value=0)
    for key in _TOKEN_TYPE_KEYS:
        if model_kwargs.get(key) is not None:
            model_kwargs[key] = torch.nn.functional.pad(model_kwargs[key], (padding, 0), value=0)
    return input_ids


def _with_chunk_size(generation_config, size):
    config = copy.copy(generation_config)
    config.prefill_chunk_size = size
    return config


def _prefill_up_to(original, self, input_ids, generation_config, model_kwargs, end, size, *args, **kwargs):
    """Upstream's chunked prefill of the prompt's positions up to ``end`` in chunks of ``size``,
    resuming after what the cache holds (upstream slices the new tokens by the cache length)."""
    attention_mask = model_kwargs["attention_mask"]
    model_kwargs["attention_mask"] = attention_mask[:, :end]
    outputs = original(self, input_ids[:, :end], _with_chunk_size(generation_config, size), model_kwargs, *args, **kwargs)
    model_kwargs["attention_mask"] = attention_mask
    return outputs


def _prefill_on_schedule(original, self, input_ids, generation_config, model_kwargs, *args, **kwargs):
    # An encoder-decoder's prompt is the encoder's: its attention mask is not the decoder prompt's, whose
    # padding the schedule would read from it.
    if generation_config.prefill_chunk_size is None or getattr(self.config, "is_encoder_decoder", False):
        return original(self, input_ids, generation_config, model_kwargs, *args, **kwargs)
    buckets = prefill_buckets(generation_config.prefill_chunk_size)
    first = kwargs.get("is_first_iteration", args[0] if args else True)
    schedule = _schedule_for(self, input_ids, generation_config, model_kwargs, first, buckets)
    if schedule is None:
        return original(self, input_ids, _with_chunk_size(generation_config, buckets[-1]), model_kwargs, *args, **kwargs)
    if model_kwargs.get("attention_mask") is None:  # resuming needs the mask to tell old tokens from new
        model_kwargs["attention_mask"] = input_ids.new_ones(input_ids.shape)
    if schedule.padding:
        input_ids = _left_pad(input_ids, generation_config, model_kwargs, schedule.padding)
    outputs, end = None, 0
    chunks = list(schedule.chunks)
    last = chunks.pop() if schedule.overlap else None
    # Consecutive chunks of one size are one upstream call.
    while chunks:
        size, count = chunks[0], 1
        while count < len(chunks) and chunks[count] == size:
            count += 1
        del chunks[:count]
        end += size * count
        outputs = _prefill_up_to(original, self, input_ids, generation_config, model_kwargs, end, size, *args, **kwargs)
    full = input_ids.shape[1]
    if last is not None:
        generation_cache(model_kwargs).crop(-schedule.overlap)
        outputs = _prefill_up_to(original, self, input_ids, generation_config, model_kwargs, full, last, *args, **kwargs)
    elif schedule.decode_tail:
        # The tail runs the decode graph: under the decode stage's settings (Transformers switches MoE
        # experts to their decode implementation there), or the same shape would be another graph.
        decode_stage = getattr(self, "_optimize_model_for_decode", contextlib.nullcontext)
        with decode_stage():
            outputs = _prefill_up_to(original, self, input_ids, generation_config, model_kwargs, full, 1, *args, **kwargs)
    return outputs


def _generate_leaves_last_chunk_short() -> bool:
    from transformers import GenerationConfig, StaticCache
    from transformers.generation.utils import GenerationMixin

    chunk_lengths = []
    probe = generation_probe(
        probe_config(),
        forward=lambda input_ids, kwargs: chunk_lengths.append(input_ids.shape[-1]),
        _valid_auto_compile_criteria=lambda self, model_kwargs, generation_config: True,
        get_compiled_call=lambda self, compile_config: self.__call__,
    )
    cache = StaticCache(config=probe_config(), max_cache_len=16)
    generation_config = GenerationConfig(prefill_chunk_size=4, pad_token_id=0, max_length=8)
    generation_config._pad_token_tensor = torch.tensor(0)
    model_kwargs = {cache_keyword(): cache, "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    GenerationMixin._prefill(probe, torch.ones(1, 6, dtype=torch.long), generation_config, model_kwargs)
    return chunk_lengths[-1] != chunk_lengths[0]


@fix(PAD_FIX, "transformers", _generate_leaves_last_chunk_short, waits_for=GENERATION_MODULE)
def patch_pad_prompt_to_chunk() -> None:
    """A prompt whose length is not a multiple of ``prefill_chunk_size`` compiles one more graph.

    Gap: chunked prefill splits the prompt into full chunks and a remainder; every distinct
    remainder is a new static shape (measured: 21 graphs for 8 unpadded prompts), and upstream
    takes one chunk size only. Detected by running upstream ``_prefill`` on a probe model and
    comparing the chunk lengths. Patch: when the prefill is compiled, ``generate`` runs it on the
    schedule of :mod:`hf_neuron.transformers.generation.prefill_schedule`: the prompt batch left padded (pad
    token, zero attention mask and positions, as tokenizer left padding) to a sum of the prefill
    buckets (``prefill_chunk_size``, an int or a list); for a prompt too long to pad within the cache,
    the last chunk overlaps the one before it (a rewindable cache) or the last tokens run through the
    decode graph. Every prompt that fits uses the bucket graphs and the decode graph only; the
    returned sequences and ``max_new_tokens`` are unchanged.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(PAD_FIX, GenerationMixin, "_prefill", _prefill_on_schedule)


__all__ = ["COUNTS_PREFILLED_TOKENS", "LEFT_PADDING_CHANGES_RESULTS", "MASK_FIX", "PAD_FIX", "RECURRENT_MASK_FIX",
           "STRIDES_FIX", "probe_config"]
