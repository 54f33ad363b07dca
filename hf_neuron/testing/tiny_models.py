"""Tiny random causal LMs for tests, examples, benchmarks and the compatibility harness.

``save_tiny_model("llama", out_dir)`` writes a checkpoint (hidden 64, 2 layers, 4 heads / 2 kv heads,
safetensors) and a small byte-level tokenizer with a chat template, loadable offline with
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``. Same seed, same weights.
The CLI is ``hf-neuron tiny-model ARCH OUT_DIR``; ``python -m hf_neuron.testing.tiny_models --audit``
tries every causal-LM architecture of the installed Transformers.
"""

from __future__ import annotations

import argparse
import sys

from .tiny.configs import (
    MULTIMODAL_TEXT_ONLY,
    OVERRIDES,
    TinyModelError,
    check_model_type,
    known_model_types,
    text_decoder_substitute,
    tiny_config,
)
from .tiny.factory import (
    auto_class_for,
    build_model,
    is_multimodal_text_only,
    model_class_for,
    save_tiny_model,
    tiny_model,
)
from .tiny.tokenizer import VOCAB_SIZE, build_tokenizer, tokenizer_fingerprint

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_neuron.testing.tiny_models",
                                     description="Audit the tiny-model factory over causal-LM architectures.")
    parser.add_argument("--audit", action="store_true", help="build, forward and generate every architecture")
    parser.add_argument("--only", default="", help="comma-separated model types (default: all)")
    parser.add_argument("--ranked", default=None, help="ranked TSV (model_type column) to report a top-N figure")
    parser.add_argument("--json", default=None, help="write the result rows to this JSON file")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per architecture")
    parser.add_argument("--no-roundtrip", action="store_true", help="skip the save -> from_pretrained check")
    args = parser.parse_args(argv)
    if not args.audit:
        parser.print_help()
        return 2
    from .tiny.audit import run_audit

    only = [t.strip() for t in args.only.split(",") if t.strip()] or None
    rows = run_audit(only, ranked=args.ranked, json_path=args.json, timeout=args.timeout,
                     roundtrip=not args.no_roundtrip)
    return 0 if all(r["status"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
