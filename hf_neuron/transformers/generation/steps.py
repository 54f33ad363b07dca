"""What a generation step looks like to the model, as ``generate`` builds it: shared by every fix and tool.

- the keyword ``generate`` keeps the cache under (renamed between Transformers releases) and the cache
  in its keyword arguments;
- whether a cache holds recurrent state only (Mamba-like models: no key/value length to resume from);
- the forward's inputs for a prefill chunk or a decode step, with the attention masks ``generate``
  builds outside the compiled forward.

This module imports no other part of the adapter: fixes, the forward tracer and ``hf-neuron plan`` all
build on it.
"""

from __future__ import annotations

import torch


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


def recurrent_only(cache) -> bool:
    """Whether every layer of ``cache`` is recurrent state (no layer with keys and values)."""
    flags = getattr(cache, "is_linear", None)
    try:
        return bool(flags) and all(flags)
    except TypeError:
        return False


def step_inputs(cache, batch_size: int, start: int, tokens: int, device) -> dict:
    """The forward's keyword arguments for ``tokens`` new tokens at position ``start`` of a generation."""
    return {
        "input_ids": torch.zeros(batch_size, tokens, dtype=torch.long, device=device),
        "attention_mask": torch.ones(batch_size, start + tokens, dtype=torch.long, device=device),
        "cache_position": torch.arange(start, start + tokens, device=device),
        "use_cache": True,
        "logits_to_keep": 1,
        cache_keyword(): cache,
    }


def generation_steps(chunk: int) -> tuple[tuple[int, int], ...]:
    """``(start, tokens)`` of the two step shapes of a chunked-prefill generation: a chunk, a decode."""
    return (0, chunk), (chunk, 1)


def cache_parameter(function) -> str:
    """The name under which ``function`` takes the cache (it was renamed between releases)."""
    import inspect

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
    positions = {} if "position_ids" in inputs else generation_position_ids(model, mask)
    prepared = model.prepare_inputs_for_generation(
        inputs["input_ids"], attention_mask=mask, is_first_iteration=first, use_cache=True,
        **{cache_keyword(): cache}, **positions,
    )
    steps = {"attention_mask": prepared.get("attention_mask", mask)}
    if prepared.get("position_ids") is not None:  # some models' own input preparation drops them
        steps["position_ids"] = prepared["position_ids"]
    return {**inputs, **steps}


def generation_position_ids(model, mask) -> dict:
    """``{"position_ids": ...}`` as ``generate`` makes them from the 2D attention mask of the tokens so
    far (a padded token's position is 0), for a decoder-only forward that takes them; else ``{}``.

    ``generate`` passes them to every such forward: one that computes positions itself from the cache's
    length (BERT's absolute position embeddings) then never reads that length as an int."""
    if not generate_passes_positions(model):
        return {}
    positions = mask.long().cumsum(-1) - 1
    return {"position_ids": positions.masked_fill(mask == 0, 0)}


def generate_passes_positions(model) -> bool:
    """Whether ``generate`` passes ``model``'s forward the positions it makes from the attention mask
    (a decoder-only forward that takes ``position_ids``), which left padding does not move.

    A forward that takes none computes its positions itself. The BART family's decoders (Pegasus,
    Marian, Blenderbot, BigBird-Pegasus, Whisper's, TrOCR, MVP) and RoFormer count them from the
    cache's length, padding included: a prompt padded further on the left gets other positions and
    other tokens. ALiBi models (Bloom, MPT) take none either but do not depend on where the prompt
    starts; they cannot be told apart without running them. A stand-in without a forward
    (:func:`generation_probe`, a Llama) takes them."""
    import inspect

    forward = getattr(model, "forward", None)
    if forward is None:
        return True
    return not model.config.is_encoder_decoder and "position_ids" in inspect.signature(forward).parameters


def generation_probe(config, forward=None, **methods):
    """A stand-in model on CPU that upstream's generation steps run on like on a real model.

    Detectors call upstream's own steps (``_prefill``, ``_prepare_cache_for_generation``) on it to see
    what they do, without building a model. ``forward(input_ids, kwargs)``, when given, sees the inputs
    of every forward call, which returns the cache under both names releases read it by; ``methods``
    add or replace methods of the probe (e.g. ``_valid_auto_compile_criteria``)."""
    import types

    from transformers.generation.utils import GenerationMixin

    def call(self, input_ids=None, **kwargs):
        forward(input_ids, kwargs)
        cache = generation_cache(kwargs)
        return types.SimpleNamespace(cache=cache, past_key_values=cache)

    namespace = {"config": config, "device": torch.device("cpu"), "dtype": torch.float32,
                 "is_remote_code": lambda self: False, **({"__call__": call} if forward else {}), **methods}
    return type("GenerationProbe", (GenerationMixin,), namespace)()


__all__ = [
    "CACHE_KEYWORDS", "cache_keyword", "cache_parameter", "generate_passes_positions", "generation_cache",
    "generation_probe", "generation_step_inputs", "generation_steps", "recurrent_only", "step_inputs",
]
