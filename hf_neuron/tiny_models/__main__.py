"""``python -m hf_neuron.tiny_models --audit``: build, run and generate every causal-LM architecture of the
installed Transformers with the tiny-model factory, and report each one's result."""

from __future__ import annotations

import argparse
import sys

from hf_neuron.tiny_models.audit import run_audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_neuron.tiny_models",
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
    only = [t.strip() for t in args.only.split(",") if t.strip()] or None
    rows = run_audit(only, ranked=args.ranked, json_path=args.json, timeout=args.timeout,
                     roundtrip=not args.no_roundtrip)
    return 0 if all(r["status"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
