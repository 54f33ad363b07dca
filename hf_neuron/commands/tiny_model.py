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
    parser.add_argument("--images", action="store_true",
                        help="an image-text-to-text checkpoint with its processor (llava, gemma3, qwen2_vl...) instead "
                             "of a causal LM; with --list, the types that have one")
    parser.add_argument("--list", action="store_true", help="print every supported model_type and exit")
    parser.set_defaults(func=run)


def _run_images(args: argparse.Namespace) -> int:
    from hf_neuron.tiny_models import TinyModelError
    from hf_neuron.tiny_models.vision import save_tiny_vision_model, vision_model_types

    if args.list:
        print("\n".join(vision_model_types()))
        return 0
    if not args.arch or not args.out_dir:
        print("error: tiny-model --images needs ARCH and OUT_DIR, e.g. `hf-neuron tiny-model --images llava "
              "./tiny-llava` (`--images --list` prints the model types)", file=sys.stderr)
        return 2
    if args.dtype != "float32":
        print("error: --images checkpoints are float32 (load them with dtype=... to cast)", file=sys.stderr)
        return 2
    try:
        out = save_tiny_vision_model(args.arch, args.out_dir, seed=args.seed)
    except TinyModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import json

    info = json.loads((out / "tiny_model.json").read_text())
    print(f"wrote tiny {info['model_type']} ({info['model_class']}, {info['parameters']:,} parameters, seed "
          f"{info['seed']}) and its {info['processor_class']} to {out}")
    print(f"load with: AutoModelForImageTextToText.from_pretrained({str(out)!r}) and AutoProcessor.from_pretrained(...)")
    return 0


def run(args: argparse.Namespace) -> int:
    from hf_neuron.tiny_models import (
        TinyModelError,
        is_multimodal_text_only,
        known_model_types,
        save_tiny_model,
    )

    if args.images:
        return _run_images(args)
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
        from hf_neuron.tiny_models.vision import RECIPES

        hint = f" (for its image-text-to-text checkpoint: hf-neuron tiny-model --images {args.arch} ...)" \
            if args.arch in RECIPES else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2
    import json

    info = json.loads((out / "tiny_model.json").read_text())
    print(f"wrote tiny {info['model_type']} ({info['model_class']}, {info['parameters']:,} parameters, "
          f"seed {info['seed']}, {info['dtype']}) to {out}")
    print(f"load with: {info['auto_class']}.from_pretrained({str(out)!r}) and AutoTokenizer.from_pretrained(...)")
    return 0
