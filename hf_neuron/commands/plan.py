"""``hf-neuron plan MODEL``: the graphs a workload will compile and the device memory it needs, before compiling.

MODEL is a local model folder or a config.json; the model is built on the meta device (no weights
read). Generation is planned by default; ``--train`` plans a TRL SFT run instead.
"""

from __future__ import annotations

import argparse
import json
import sys


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers such as 1,4") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers such as 1,4")
    return values


def prefill_chunk_arg(values: list[int] | None):
    """``--prefill-chunk`` as generate takes it: one size as an int, several as a list."""
    if values is None:
        return None
    return values[0] if len(values) == 1 else values


def add_generation_arguments(p: argparse.ArgumentParser) -> None:
    """The workload options ``plan`` and ``warmup`` share (the same values must be used for both)."""
    p.add_argument("model", metavar="MODEL", help="local model folder (or, for plan, a config.json)")
    p.add_argument("--batch-sizes", type=int_list, default=[1], metavar="1,4",
                   help="generation batch sizes, or the batch_buckets of generate (default: 1)")
    p.add_argument("--max-cache-len", type=int, default=None, metavar="N",
                   help="static cache length of generate (default: hf_neuron's 1024)")
    p.add_argument("--prefill-chunk", type=int_list, default=None, metavar="64,512",
                   help="prefill chunk size, or several (prefill buckets, one graph each; default: 64,512 capped "
                        "to half the max cache length)")
    p.add_argument("--image-size", dest="image_sizes", type=image_size_list, default=None, metavar="HxW,HxW",
                   help="processed image sizes of a vision-language model, one vision-tower graph each (default: "
                        "the vision tower's own input size)")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel size (default: 1)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the config's)")


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="predict the graphs and device memory of a workload, compiling nothing",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_generation_arguments(p)
    p.add_argument("--train", action="store_true", help="plan a TRL SFT run (torch_compile) instead of generation")
    p.add_argument("--max-length", type=int, default=None, metavar="N", help="SFT max_length (default: TRL's 1024)")
    p.add_argument("--per-device-batch", type=int, default=1, metavar="N", help="SFT batch per device (default: 1)")
    p.add_argument("--packing", action="store_true", help="SFT with packing")
    p.add_argument("--packing-strategy", choices=("bfd", "wrapped"), default="bfd",
                   help="TRL packing strategy (default: bfd)")
    p.add_argument("--instance", default="trn2", help="trn2, trn2u or trn3 (default: trn2)")
    p.add_argument("--lnc", type=int, default=2, choices=(1, 2), help="NEURON_LOGICAL_NC_CONFIG (default: 2)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def image_size_list(text: str) -> list[tuple[int, int]]:
    """``"896x896,448x672"`` -> ``[(896, 896), (448, 672)]`` (argparse type: a clear error otherwise)."""
    sizes = []
    for item in text.split(","):
        height, sep, width = item.strip().lower().partition("x")
        if not sep or not height.isdigit() or not width.isdigit() or int(height) < 1 or int(width) < 1:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not HEIGHTxWIDTH in pixels, e.g. 896x896")
        sizes.append((int(height), int(width)))
    return sizes


def run(args: argparse.Namespace) -> int:
    from hf_neuron.transformers.plan import PlanError, plan_generation, plan_training

    hardware = {"tp": args.tp, "dtype": args.dtype, "instance": args.instance, "logical_nc_config": args.lnc}
    try:
        if args.train and args.image_sizes:
            raise PlanError("--image-size plans generation from images; --train plans text SFT: leave one out")
        if args.train:
            plan = plan_training(args.model, args.max_length, args.per_device_batch, packing=args.packing,
                                 packing_strategy=args.packing_strategy, **hardware)
        else:
            plan = plan_generation(args.model, args.batch_sizes, args.max_cache_len, prefill_chunk_arg(args.prefill_chunk),
                                   image_sizes=args.image_sizes, **hardware)
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=1) if args.json else plan.render())
    return 0 if plan.memory.fits else 1
