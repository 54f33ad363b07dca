"""``hf-neuron tiny-model ARCH OUT_DIR``: write a tiny random checkpoint + tokenizer for a model type."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tiny-model",
        help="write a tiny random model (any Transformers causal-LM model_type) and a small tokenizer",
        description=(
            "Write a tiny random checkpoint (hidden 64, 2 layers, safetensors) and a small byte-level tokenizer "
            "with a chat template to OUT_DIR, loadable offline with AutoModelForCausalLM / AutoTokenizer. "
            "Same seed, same weights."
        ),
    )
    parser.add_argument("arch", nargs="?", metavar="ARCH", help="Transformers model_type, e.g. llama, qwen3, gpt2")
    parser.add_argument("out_dir", nargs="?", metavar="OUT_DIR", help="directory to write (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    parser.add_argument("--list", action="store_true", help="print every supported model_type and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hf_neuron.tiny_models import (
        TinyModelError,
        is_multimodal_text_only,
        known_model_types,
        save_tiny_model,
    )

    if args.list:
        for model_type in known_model_types():
            flag = "  (multimodal class, text-only use)" if is_multimodal_text_only(model_type) else ""
            print(f"{model_type}{flag}")
        return 0
    if not args.arch or not args.out_dir:
        print("error: tiny-model needs ARCH and OUT_DIR, e.g. `hf-neuron tiny-model llama ./tiny-llama` "
              "(`--list` prints the model types)", file=sys.stderr)
        return 2
    try:
        out = save_tiny_model(args.arch, args.out_dir, seed=args.seed, dtype=args.dtype)
    except TinyModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import json

    info = json.loads((out / "tiny_model.json").read_text())
    print(f"wrote tiny {info['model_type']} ({info['model_class']}, {info['parameters']:,} parameters, "
          f"seed {info['seed']}, {info['dtype']}) to {out}")
    print(f"load with: {info['auto_class']}.from_pretrained({str(out)!r}) and AutoTokenizer.from_pretrained(...)")
    return 0
