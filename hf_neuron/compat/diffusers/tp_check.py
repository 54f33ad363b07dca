"""Tensor-parallel parity check for diffusers transformer classes, run under torchrun.

    HF_NEURON_SIMULATOR=1 torchrun --nproc_per_node=2 -m hf_neuron.compat.diffusers.tp_check \\
        --classes SD3Transformer2DModel,WanTransformer3DModel --out results.json

For each class, every rank builds the same seeded tiny model (``hf_neuron.testing.tiny_diffusers``) and
computes the unsharded (TP=1) output on CPU; then the model is sharded both ways diffusers supports —
``enable_parallelism(config=TensorParallelConfig(mesh=...))`` on the model in memory, and
``from_pretrained(dir, parallel_config=...)`` from a tiny checkpoint rank 0 saved — run on each rank's
device, and compared with the reference. One launch checks many classes; rank 0 writes one JSON
record per class. A failing class is recorded and the loop goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist

from hf_neuron.compat.diffusers.records import checking, failure

ATOL = 1e-5
RTOL = 1e-4


def _max_diff(reference: list[torch.Tensor], result: list[torch.Tensor]) -> float:
    if len(reference) != len(result):
        raise AssertionError(f"{len(result)} output tensors, expected {len(reference)}")
    worst = 0.0
    for ref, out in zip(reference, result):
        out = out.detach().float().cpu()
        if out.shape != ref.shape:
            raise AssertionError(f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        if not torch.isfinite(out).all():
            raise AssertionError("non-finite values in the sharded output")
        worst = max(worst, (out - ref).abs().max().item())
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=RTOL)
    return worst


def sharded_fraction(model: torch.nn.Module) -> float:
    """Share of the parameters of the plan's repeated blocks (the ModuleLists its globs expand) that are sharded."""
    from torch.distributed.tensor import DTensor, Shard

    containers = tuple(
        pattern.partition("*")[0] for pattern in (getattr(model, "_tp_plan", None) or {}) if "*" in pattern
    )
    total = sharded = 0
    for name, param in model.named_parameters():
        if not name.startswith(containers):
            continue
        numel = param.numel()  # the global size for a DTensor
        total += numel
        if isinstance(param, DTensor) and any(isinstance(p, Shard) for p in param.placements):
            sharded += numel
    return sharded / total if total else 0.0


def _run(model, inputs) -> list[torch.Tensor]:
    from hf_neuron.testing.tiny_diffusers import output_tensors

    with torch.no_grad():
        output = model(**inputs, return_dict=False)
    return output_tensors(output)


def _sharded(spec, mesh, device):
    """The tiny model built on the host, sharded in memory over ``mesh``, then moved to ``device``."""
    from diffusers import TensorParallelConfig

    model = spec.build()
    model.enable_parallelism(config=TensorParallelConfig(mesh=mesh))
    return model.to(device)


def check_class(class_name: str, mesh, device, workdir: str, modes: list[str]) -> dict:
    from diffusers import TensorParallelConfig

    from hf_neuron.testing.tiny_diffusers import TINY

    spec = TINY[class_name]
    record: dict = {"class": class_name}
    started = time.perf_counter()
    try:
        reference_model = spec.build()
        reference = [t.detach().float().cpu() for t in _run(reference_model, spec.inputs())]
    except Exception as exc:  # a broken tiny spec, not a TP failure
        record.update(failure(exc), ok=False)
        record["error"] = f"reference (TP=1) run failed: {record['error']}"
        return record
    device_inputs = spec.inputs(device=device)

    if "memory" in modes:
        record["memory"] = memory = {"ok": False}
        with checking(memory):
            model = _sharded(spec, mesh, device)
            record["sharded_fraction"] = round(sharded_fraction(model), 3)
            memory.update(ok=True, max_abs_diff=_max_diff(reference, _run(model, device_inputs)))

    if "compiled" in modes:
        # Sharding and regional compilation together, as a large pipeline runs on Trainium.
        record["compiled"] = compiled = {"ok": False}
        with checking(compiled):
            from hf_neuron.compat.diffusers.compile_check import step_inputs
            from hf_neuron.graphs import count_graphs

            model = _sharded(spec, mesh, device)
            torch._dynamo.reset()
            model.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
            with count_graphs() as first:
                worst = _max_diff(reference, _run(model, device_inputs))
            with count_graphs() as later:
                _run(model, step_inputs(spec, 1, device))
            compiled.update(ok=later.count == 0, max_abs_diff=worst, graphs_first_step=first.count,
                            graphs_later_steps=later.count)

    if "pretrained" in modes:
        path = os.path.join(workdir, class_name)
        record["pretrained"] = pretrained = {"ok": False}
        with checking(pretrained):
            if dist.get_rank() == 0:
                reference_model.save_pretrained(path)
            dist.barrier()
            model = spec.model_class().from_pretrained(path, parallel_config=TensorParallelConfig(mesh=mesh))
            model.to(device)
            pretrained.update(ok=True, max_abs_diff=_max_diff(reference, _run(model, device_inputs)))
    record["ok"] = all(record[m]["ok"] for m in modes)
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record


def _allow_cpu_mesh() -> None:
    """Development fallback: upstream's TP supports accelerators only. Widen it for this process."""
    import diffusers.hooks.tensor_parallel as tp

    if "cpu" not in tp._SUPPORTED_TP_DEVICES:
        tp._SUPPORTED_TP_DEVICES = (*tp._SUPPORTED_TP_DEVICES, "cpu")
    if torch.accelerator.device_count() == 0:
        # `_resolve_parallel_config` computes `rank % torch.accelerator.device_count()`.
        torch.accelerator.device_count = lambda: 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", default="all", help="comma-separated class names, or 'all' (every tiny spec)")
    parser.add_argument("--device", default="auto", choices=("auto", "neuron", "cpu"))
    parser.add_argument("--modes", default="memory,pretrained", help="any of memory, pretrained, compiled")
    parser.add_argument("--out", default=None, help="JSON file rank 0 writes the per-class records to")
    parser.add_argument("--workdir", default=None, help="directory for the tiny checkpoints (default: a temp dir)")
    args = parser.parse_args(argv)

    device_type = args.device
    if device_type == "auto":
        device_type = "neuron" if hasattr(torch, "neuron") and torch.neuron.is_available() else "cpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "neuron":
        torch.neuron.set_device(local_rank)
        dist.init_process_group(backend="neuron")
        device = torch.device("neuron", local_rank)
    else:
        dist.init_process_group(backend="gloo")
        device = torch.device("cpu")

    import diffusers  # noqa: F401  (activates the adapter)
    from torch.distributed.device_mesh import init_device_mesh

    from hf_neuron.testing.tiny_diffusers import TINY

    if device_type == "cpu":
        _allow_cpu_mesh()
    mesh = init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("tp",))
    classes = list(TINY) if args.classes == "all" else [c for c in args.classes.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]

    # One checkpoint directory shared by the ranks of this launch (same host), named without a collective.
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT", "0")
    workdir = args.workdir or os.path.join(tempfile.gettempdir(), f"hf_neuron_tp_check_{run_id}")
    if dist.get_rank() == 0:
        os.makedirs(workdir, exist_ok=True)
    records = []
    for class_name in classes:
        record = check_class(class_name, mesh, device, workdir, modes)
        records.append(record)
        if dist.get_rank() == 0:
            summary = {k: v for k, v in record.items() if k != "traceback"}
            print(("PASS " if record["ok"] else "FAIL ") + json.dumps(summary, default=str)[:800], flush=True)
    dist.barrier()
    if dist.get_rank() == 0 and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    if dist.get_rank() == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device_type, "world_size": dist.get_world_size(), "results": records}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
