"""Build tiny random causal LMs (weights + tokenizer) for any Transformers ``model_type``, offline."""

from __future__ import annotations

import contextlib
import copy
import json
import pathlib

from . import tokenizer as tok
from .configs import (
    MULTIMODAL_TEXT_ONLY,
    TinyModelError,
    built_type,
    check_model_type,
    text_decoder_substitute,
    tiny_config,
)

# A tiny model above this many parameters means the shrink missed a size: fail instead of
# filling the disk and the CI budget.
MAX_PARAMETERS = 20_000_000

_DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16", "half": "float16"}


def _class_name_for(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    check_model_type(model_type)
    model_type = built_type(model_type)
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    return MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[model_type]


def model_class_for(model_type: str):
    """The model class the factory builds for `model_type`.

    That is the AutoModelForCausalLM class, except for the four types transformers ships only as
    multimodal classes (kimi_k25, mistral3, muse_glimmer, mistral4: see :func:`is_multimodal_text_only`),
    which use their image-text-to-text class, text-only, and the types whose multimodal class needs a
    library that is not installed (Gemma 3n without timm), which use their text decoder's class.
    """
    import transformers

    return getattr(transformers, _class_name_for(model_type))


def auto_class_for(model_type: str):
    """The Auto class that loads a saved tiny model of `model_type` (``AutoModelForCausalLM`` mostly)."""
    import transformers

    check_model_type(model_type)
    if model_type in MULTIMODAL_TEXT_ONLY:
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def is_multimodal_text_only(model_type: str) -> bool:
    """True for the types not in the causal-LM mapping that the factory builds with a multimodal class."""
    return model_type in MULTIMODAL_TEXT_ONLY


def _resolve_dtype(dtype):
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    name = _DTYPES.get(str(dtype).lower().removeprefix("torch."))
    if name is None:
        raise TinyModelError(f"unsupported dtype {dtype!r}: use float32, bfloat16 or float16")
    return getattr(torch, name)


def _instantiate(config, model_type: str, **kwargs):
    """Build the model class for `model_type` from `config` (the Auto class, or the class directly when
    it takes a nested config, e.g. musicgen's decoder)."""
    auto = auto_class_for(model_type)
    cls = model_class_for(model_type)
    expected = getattr(cls, "config_class", None)
    if expected is not None and not isinstance(config, expected):
        nested = [sub for sub in vars(config).values() if isinstance(sub, expected)]
        text_sub = getattr(config, "sub_configs", {}).get("text_config")
        if len(nested) == 1 and text_sub is not expected:
            return cls._from_config(nested[0], **kwargs)
    return auto.from_config(config, **kwargs)


def count_parameters(config, model_type: str) -> int:
    """Parameters of the model `config` would build, counted on the meta device (no memory used)."""
    import torch

    with torch.device("meta"):
        model = _instantiate(config, model_type)
    return sum(p.numel() for p in model.parameters())


def build_model(model_type: str, *, seed: int = 0, dtype=None, config=None, **overrides):
    """A tiny random model of `model_type`, deterministic for `seed` (CPU, eval mode)."""
    return _build(model_type, seed=seed, dtype=dtype, config=config, **overrides)[0]


def _build(model_type: str, *, seed: int = 0, dtype=None, config=None, **overrides):
    """``(model, config)``: `config` is the full tiny config (composite for multimodal wrappers), which
    may be larger than ``model.config`` when the causal-LM class takes only the text part."""
    import torch

    dtype = _resolve_dtype(dtype)
    if config is None:
        config = tiny_config(model_type, seed=seed, **overrides)
    n_params = count_parameters(config, model_type)
    if n_params > MAX_PARAMETERS:
        raise TinyModelError(
            f"tiny {model_type!r} would have {n_params:,} parameters (> {MAX_PARAMETERS:,}): the generic shrink "
            f"missed a size; add an entry for it to OVERRIDES in hf_neuron/tiny_models/configs.py"
        )
    # Seed a private RNG state so building never disturbs the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _instantiate(config, model_type, dtype=torch.float32)
    model = model.to(dtype)
    if getattr(model, "generation_config", None) is not None:
        gen = model.generation_config
        gen.pad_token_id = tok.PAD_TOKEN_ID
        gen.bos_token_id = tok.BOS_TOKEN_ID
        gen.eos_token_id = tok.EOS_TOKEN_ID
    return model.eval(), config


def tiny_model(model_type: str, *, seed: int = 0, dtype=None, **overrides):
    """``(model, tokenizer)`` in memory: a tiny random `model_type` model and the tiny tokenizer."""
    model = build_model(model_type, seed=seed, dtype=dtype, **overrides)
    return model, tok.build_tokenizer()


@contextlib.contextmanager
def _progress_bars_off():
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def save_tiny_model(model_type: str, out_dir, *, seed: int = 0, dtype=None, **overrides) -> pathlib.Path:
    """Write a tiny random `model_type` checkpoint (safetensors) and the tiny tokenizer to `out_dir`.

    Loadable offline with ``AutoModelForCausalLM.from_pretrained(out_dir)`` (``auto_class_for`` for the
    multimodal types) and ``AutoTokenizer.from_pretrained(out_dir)``. Returns the directory.
    """
    out = pathlib.Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TinyModelError(f"{out} exists and is not a directory: choose a directory for the tiny model")
    # Everything that can fail (bad type, bad dtype, shrink failure) happens before anything is written.
    model, config = _build(model_type, seed=seed, dtype=dtype, **overrides)
    write_checkpoint(model, config, out, model_type=model_type, seed=seed)
    return out


def write_checkpoint(model, config, out_dir, *, model_type: str, seed: int | None = None) -> pathlib.Path:
    """Save `model` (built from tiny `config`) and the tiny tokenizer to `out_dir`.

    When the causal-LM class took only the text part of a composite config (qwen3_5, gemma3, mllama...),
    config.json is the composite config, as in released checkpoints: ``model_type`` stays the one asked
    for and ``AutoModelForCausalLM`` maps it back to the same class.
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _progress_bars_off():
        model.save_pretrained(out)
    if type(model.config) is not type(config) and model.config.model_type != config.model_type:
        composite = copy.deepcopy(config)
        composite.architectures = [type(model).__name__]
        composite.dtype = model.dtype
        composite.save_pretrained(out)
    tok.build_tokenizer().save_pretrained(out)
    info = {
        "model_type": model_type,
        "config_model_type": config.model_type,
        "model_class": type(model).__name__,
        "auto_class": auto_class_for(model_type).__name__,
        "multimodal_text_only": is_multimodal_text_only(model_type),
        "text_decoder_only": (text_decoder_substitute(model_type) or (None, None))[1],
        "seed": seed,
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_fingerprint": tok.tokenizer_fingerprint(),
    }
    (out / "tiny_model.json").write_text(json.dumps(info, indent=2) + "\n")
    return out
