"""Tokenizing prompts the way ``generate`` on Neuron wants them: left padded to a multiple of the
prefill chunk size, so that every prefill chunk has the one compiled shape.

``generate`` pads an unpadded batch itself (fix ``generate-pad-prompt-to-chunk``); padding up front
gives the same tensors and lets you see them.
"""

from __future__ import annotations

from typing import Any

from hf_neuron.transformers.generation.defaults import resolve_prefill_chunk_size


def _chunk_size_for(model, prefill_chunk_size: int | None, max_cache_len: int | None) -> int:
    if prefill_chunk_size is None and model is not None:
        prefill_chunk_size = getattr(model.generation_config, "prefill_chunk_size", None)
        if max_cache_len is None:
            max_cache_len = getattr(model.generation_config, "max_cache_len", None)
    return resolve_prefill_chunk_size(prefill_chunk_size, max_cache_len)


def generation_padding_kwargs(
    prefill_chunk_size: int | None = None, *, model=None, max_cache_len: int | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``tokenizer(...)`` (for chat templates, see :func:`tokenize_chats`).

    ``padding=True, padding_side="left", pad_to_multiple_of=<chunk>``, where the chunk is
    ``prefill_chunk_size``, else the model's ``generation_config.prefill_chunk_size``, else the
    smallest prefill bucket generate uses on Neuron (64 by default).
    """
    return {
        "padding": True,
        "padding_side": "left",
        "pad_to_multiple_of": _chunk_size_for(model, prefill_chunk_size, max_cache_len),
    }


def tokenize_prompts(
    tokenizer,
    prompts: str | list[str],
    *,
    prefill_chunk_size: int | None = None,
    model=None,
    max_cache_len: int | None = None,
    return_tensors: str = "pt",
    **kwargs,
):
    """``tokenizer(prompts, ...)`` left padded to a multiple of the prefill chunk size.

    Other keyword arguments go to the tokenizer. Example::

        inputs = tokenize_prompts(tokenizer, ["Hello", "The capital of France is"], model=model)
        model.generate(**inputs.to(model.device), max_new_tokens=32)
    """
    padding = generation_padding_kwargs(prefill_chunk_size, model=model, max_cache_len=max_cache_len)
    padding.update(kwargs)
    return tokenizer(prompts, return_tensors=return_tensors, **padding)


def tokenize_chats(
    tokenizer,
    conversations,
    *,
    prefill_chunk_size: int | None = None,
    model=None,
    max_cache_len: int | None = None,
    add_generation_prompt: bool = True,
    return_tensors: str = "pt",
    **kwargs,
):
    """``tokenizer.apply_chat_template(conversations, ...)`` left padded to a multiple of the chunk size.

    ``conversations`` is one conversation (a list of ``{"role", "content"}``) or a list of them.
    Other keyword arguments go to ``apply_chat_template``.
    """
    padding = generation_padding_kwargs(prefill_chunk_size, model=model, max_cache_len=max_cache_len)
    tokenizer_kwargs = dict(kwargs.pop("tokenizer_kwargs", None) or {})
    tokenizer_kwargs.setdefault("padding_side", padding["padding_side"])
    tokenizer_kwargs.setdefault("pad_to_multiple_of", padding["pad_to_multiple_of"])
    return tokenizer.apply_chat_template(
        conversations,
        add_generation_prompt=add_generation_prompt,
        padding=True,
        return_tensors=return_tensors,
        return_dict=True,
        tokenizer_kwargs=tokenizer_kwargs,
        **kwargs,
    )
