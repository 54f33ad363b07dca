"""Graphs compiled over a 4-step denoising loop: whole-model ``torch.compile`` vs ``compile_repeated_blocks``.

    HF_NEURON_SIMULATOR=1 python -m hf_neuron.compat.diffusers.compile_benchmark [--classes A,B] [--steps 4]

It is the last step of ``hf-neuron compat diffusers``, whose table quotes what it prints;
``benchmarks/diffusers_compile.py`` in a checkout runs the same.

Per family (a tiny transformer of each, ``hf_neuron.testing.tiny_diffusers``), from one run: the graphs
the neuron backend compiles over the loop (each graph is one neuronx-cc compile on Trainium), the
FX nodes they hold (what the compiler has to chew through), the wall time of the first step (the
compile) and the ratios regional / whole. Whole-model compile uses ``fullgraph=False`` (graph breaks
allowed, as a user would first try); regional uses the recipe's ``fullgraph=True, dynamic=False``.
Numbers are from the simulator: graph and node counts carry over to Trainium, times do not. Node
counts come from the simulator's graph log (0 without the simulator; graphs are counted either way).
"""

from __future__ import annotations

import argparse
import time

import torch

DEFAULT_CLASSES = (
    "ChromaTransformer2DModel", "Flux3Transformer2DModel", "MiniMaxH3Transformer3DModel", "LTXVideoTransformer3DModel",
    "LTX2VideoTransformer3DModel", "Lumina2Transformer2DModel", "ZImageTransformer2DModel",
    "AuraFlowTransformer2DModel", "CogView4Transformer2DModel", "HiDreamImageTransformer2DModel",
    "Krea2Transformer2DModel",
)


def _loop(model, spec, device, steps, compile_fn):
    from hf_neuron.compat.diffusers.compile_check import step_inputs
    from hf_neuron.graphs import count_graphs

    torch._dynamo.reset()
    model = compile_fn(model)
    stats = {}
    with count_graphs() as graphs, torch.no_grad():
        start = time.perf_counter()
        model(**step_inputs(spec, 0, device), return_dict=False)
        stats["first_step_s"] = time.perf_counter() - start
        start = time.perf_counter()
        for k in range(1, steps):
            model(**step_inputs(spec, k, device), return_dict=False)
        stats["later_step_s"] = (time.perf_counter() - start) / max(steps - 1, 1)
    stats["graphs"] = graphs.count
    stats["nodes"] = sum(r.get("node_count") or 0 for r in graphs.records)
    stats["breaks_or_fallbacks"] = sum(r.get("status") != "compiled" for r in graphs.records)
    return stats


def run(class_name: str, device: str, steps: int) -> dict:
    from hf_neuron.testing.tiny_diffusers import TINY

    spec = TINY[class_name]
    whole = _loop(spec.build().to(device), spec, device, steps,
                  lambda m: torch.compile(m, backend="neuron", dynamic=False))

    def regional(m):
        m.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        return m

    blocks = _loop(spec.build().to(device), spec, device, steps, regional)
    return {"class": class_name, "whole": whole, "regional": blocks}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", default=",".join(DEFAULT_CLASSES))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--device", default="neuron")
    args = parser.parse_args(argv)

    import diffusers  # noqa: F401  (activates the adapter)

    header = (f"{'class':36s} {'graphs whole':>12s} {'graphs regional':>15s} {'nodes whole':>11s} "
              f"{'nodes regional':>14s} {'nodes ratio':>11s} {'1st step ratio':>14s}")
    print(f"{args.steps}-step denoising loop on {args.device}; ratios are regional / whole-model")
    print(header)
    for class_name in [c for c in args.classes.split(",") if c]:
        try:
            r = run(class_name, args.device, args.steps)
        except Exception as exc:  # a class that fails is reported, the run goes on
            print(f"{class_name:36s} error: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        w, b = r["whole"], r["regional"]
        print(f"{class_name:36s} {w['graphs']:>12d} {b['graphs']:>15d} {w['nodes']:>11d} {b['nodes']:>14d} "
              f"{b['nodes'] / max(w['nodes'], 1):>11.2f} {b['first_step_s'] / max(w['first_step_s'], 1e-9):>14.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
