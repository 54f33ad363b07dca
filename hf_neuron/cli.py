"""The ``hf-neuron`` command line. Each subcommand lives in ``hf_neuron.commands.<module>`` and
exposes ``register(subparsers)``, which adds its parser and sets ``func`` to its handler."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (module in hf_neuron.commands) - one line per subcommand module.
COMMAND_MODULES = [
    "check",
    "env",
    "tiny_model",
    "demo",
    "compat",
    "plan",
    "warmup",
    "cache",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-neuron",
        description="Hugging Face on AWS Trainium (TorchNeuron): environment, tiny models, demos, compatibility, cold start.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"hf_neuron.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "device_free", False) and "torch" not in sys.modules:
        # A command that reads configs and builds meta models needs no device: the simulated one (and the
        # build of its extension, on a fresh install) is not started for it.
        os.environ["HF_NEURON_SIMULATOR"] = "0"
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
