"""``hf-neuron warmup MODEL``: compile a generation workload's graphs once, before traffic.

Loads MODEL (a local folder) on the process's neuron device and runs one dummy greedy call per batch
size, which compiles the prefill and decode graphs ``hf-neuron plan`` lists. The compiled graphs land
in TorchNeuron's compiled-graph cache (``TORCH_NEURONX_NEFF_CACHE_DIR``): later processes with the
same settings load them instead of compiling; ``hf-neuron cache export`` packs them for other machines.
With ``--tp N`` it starts itself under torchrun with N processes (one NeuronCore each).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from hf_neuron.commands.plan import add_generation_arguments, prefill_chunk_arg


def register(subparsers) -> None:
    p = subparsers.add_parser("warmup", help="compile a generation workload's graphs once (torchrun-aware for --tp)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_generation_arguments(p)
    p.set_defaults(func=run)


def _under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def _relaunch_under_torchrun(args: argparse.Namespace) -> int:
    """The same warm-up as N torchrun processes on this machine (one NeuronCore each)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.tp}",
               "-m", "hf_neuron.cli", "warmup", args.model, "--batch-sizes", ",".join(map(str, args.batch_sizes)),
               "--tp", str(args.tp)]
    prefill_chunk = None if args.prefill_chunk is None else ",".join(map(str, args.prefill_chunk))
    for flag, value in (("--max-cache-len", args.max_cache_len), ("--prefill-chunk", prefill_chunk),
                        ("--dtype", args.dtype)):
        if value is not None:
            command += [flag, str(value)]
    return subprocess.call(command)


def run(args: argparse.Namespace) -> int:
    if args.tp < 1:
        print("error: --tp must be a positive integer", file=sys.stderr)
        return 2
    if args.tp > 1 and not _under_torchrun():
        return _relaunch_under_torchrun(args)
    if _under_torchrun() and int(os.environ["WORLD_SIZE"]) != args.tp:
        print(f"error: --tp {args.tp} but torchrun started {os.environ['WORLD_SIZE']} processes", file=sys.stderr)
        return 2
    if not os.path.isdir(args.model):
        print(f"error: {args.model} is not a local model folder (save_pretrained output)", file=sys.stderr)
        return 2
    from hf_neuron.transformers.generation.defaults import DEFAULT_MAX_CACHE_LEN, resolve_prefill_buckets
    from hf_neuron.transformers.generation.prefill_schedule import check_prefill_buckets

    try:  # before the model loads
        check_prefill_buckets(resolve_prefill_buckets(prefill_chunk_arg(args.prefill_chunk)),
                              args.max_cache_len or DEFAULT_MAX_CACHE_LEN)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM

    from hf_neuron.transformers import warmup

    if not (hasattr(torch, "neuron") and torch.neuron.is_available()):
        print("error: no neuron device in this process: warm-up compiles for Trainium (on a machine without "
              "Trainium, set HF_NEURON_SIMULATOR=1 to use the simulated device)", file=sys.stderr)
        return 2
    load = {"dtype": args.dtype} if args.dtype else {}
    rank = 0
    if args.tp > 1:
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh
        from transformers import DistributedConfig

        dist.init_process_group(backend="neuron")
        rank = dist.get_rank()
        mesh = DeviceMesh("neuron", list(range(dist.get_world_size())))
        model = AutoModelForCausalLM.from_pretrained(args.model, distributed_config=DistributedConfig(tp_size=args.tp),
                                                     device_mesh=mesh, **load)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, device_map="neuron", **load)
    try:
        report = warmup(model, args.batch_sizes, args.max_cache_len, prefill_chunk_arg(args.prefill_chunk),
                        progress=rank == 0)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from hf_neuron.compile_cache import cache_dir

    prefix = f"[rank {rank}] " if args.tp > 1 else ""
    print(f"{prefix}{report.summary()}")
    if rank == 0:
        print(f"{prefix}compiled-graph cache: {cache_dir()}")
    if args.tp > 1:
        torch.distributed.destroy_process_group()
    return 0
