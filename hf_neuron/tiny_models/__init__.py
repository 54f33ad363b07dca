"""Tiny random causal LMs for tests, examples, benchmarks and the compatibility harness.

``save_tiny_model("llama", out_dir)`` writes a checkpoint (hidden 64, 2 layers, 4 heads / 2 kv heads,
safetensors) and a small byte-level tokenizer with a chat template, loadable offline with
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``. Same seed, same weights.
The CLI is ``hf-neuron tiny-model ARCH OUT_DIR``; ``python -m hf_neuron.tiny_models --audit``
tries every causal-LM architecture of the installed Transformers.
"""

from __future__ import annotations

from .configs import (
    MULTIMODAL_TEXT_ONLY,
    OVERRIDES,
    TinyModelError,
    check_model_type,
    known_model_types,
    text_decoder_substitute,
    tiny_config,
)
from .factory import (
    auto_class_for,
    build_model,
    is_multimodal_text_only,
    model_class_for,
    save_tiny_model,
    tiny_model,
)
from .tokenizer import VOCAB_SIZE, build_tokenizer, tokenizer_fingerprint

__all__ = [
    "MULTIMODAL_TEXT_ONLY",
    "OVERRIDES",
    "TinyModelError",
    "VOCAB_SIZE",
    "auto_class_for",
    "build_model",
    "build_tokenizer",
    "check_model_type",
    "is_multimodal_text_only",
    "known_model_types",
    "model_class_for",
    "save_tiny_model",
    "text_decoder_substitute",
    "tiny_config",
    "tiny_model",
    "tokenizer_fingerprint",
]
