"""Regional-compilation check: ``compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)``.

    HF_NEURON_SIMULATOR=1 python -m hf_neuron.compat.diffusers.compile_check --classes SD3Transformer2DModel --out r.json

For each class: the tiny model (``hf_neuron.testing.tiny_diffusers``) runs a 4-step "denoising loop" (same
shapes, a different timestep each step) eagerly on CPU, then on the neuron device with its repeated
blocks compiled. Recorded per class: the distinct block classes compiled, graphs compiled at the first
step (one per distinct block structure and input shape), graphs compiled by the later steps (must
be 0: no recompiles across denoising steps), the largest difference to CPU, and for a failure the
error (Dynamo names the op that broke the full graph).
"""

from __future__ import annotations

import argparse
import json

import torch

from hf_neuron.compat.diffusers.records import checking
from hf_neuron.graphs import count_graphs
from hf_neuron.testing.tiny_diffusers import TINY, TinySpec, output_tensors

STEPS = 4
ATOL = 1e-5
RTOL = 1e-4
TIMESTEP_KEYS = ("timestep", "timesteps", "t")


def step_inputs(spec: TinySpec, step: int, device="cpu") -> dict:
    """The tiny inputs with the timestep moved as a sampler moves it: same shape, new value."""
    inputs = spec.inputs(device=device)
    for key in TIMESTEP_KEYS:
        if key in inputs and isinstance(inputs[key], torch.Tensor):
            inputs[key] = inputs[key] * (1.0 - 0.2 * step)
            break
    return inputs


def compiled_block_classes(model: torch.nn.Module) -> list[str]:
    names = set(getattr(model, "_repeated_blocks", None) or ())
    return sorted({type(m).__name__ for m in model.modules() if type(m).__name__ in names})


def _forward(model, inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach().float().cpu() for t in output_tensors(model(**inputs, return_dict=False))]


def check_class(class_name: str, device: str = "neuron", steps: int = STEPS) -> dict:
    spec = TINY[class_name]
    record: dict = {"class": class_name, "ok": False}
    with checking(record):
        model = spec.build()
        references = [_forward(model, step_inputs(spec, k)) for k in range(steps)]
        record["block_classes"] = compiled_block_classes(model)
        model.to(device)
        eager = _forward(model, step_inputs(spec, 0, device))
        record["eager_max_abs_diff"] = max((e - r).abs().max().item() for e, r in zip(eager, references[0]))
        for ref, out in zip(references[0], eager):
            torch.testing.assert_close(out, ref, atol=ATOL, rtol=RTOL)
        record["eager"] = True
        torch._dynamo.reset()
        model.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        worst = 0.0
        with count_graphs() as first:
            outputs = _forward(model, step_inputs(spec, 0, device))
        with count_graphs() as later:
            all_outputs = [outputs] + [_forward(model, step_inputs(spec, k, device)) for k in range(1, steps)]
        for reference, result in zip(references, all_outputs):
            for ref, out in zip(reference, result):
                worst = max(worst, (out - ref).abs().max().item())
                torch.testing.assert_close(out, ref, atol=ATOL, rtol=RTOL)
        record.update(
            graphs_first_step=first.count,
            graphs_later_steps=later.count,
            graph_status=sorted({r.get("status") for r in first.records + later.records}),
            max_abs_diff=worst,
        )
        record["ok"] = later.count == 0 and first.count >= 1 and record["graph_status"] == ["compiled"]
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", default="all", help="comma-separated class names, or 'all' (every tiny spec)")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import diffusers  # noqa: F401  (activates the adapter)

    classes = list(TINY) if args.classes == "all" else [c for c in args.classes.split(",") if c]
    records = []
    for class_name in classes:
        record = check_class(class_name, args.device)
        records.append(record)
        summary = {k: v for k, v in record.items() if k != "traceback"}
        print(("PASS " if record["ok"] else "FAIL ") + json.dumps(summary, default=str)[:700], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "results": records}, f, indent=1)
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
