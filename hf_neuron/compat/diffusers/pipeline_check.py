"""Tiny pipelines on the neuron device against CPU, eager and with repeated-block compilation.

    HF_NEURON_SIMULATOR=1 python -m hf_neuron.compat.diffusers.pipeline_check --families qwenimage,wan,chroma --out r.json

For each family of :mod:`hf_neuron.testing.tiny_pipelines`: the whole pipeline runs on CPU (the
reference); then the transformer and the VAE move to the device while the text encoder stays on
CPU (embeddings computed there and moved, as ``scripts/diffusers_tp_example.py`` does), and the same
seeded generation runs eagerly, then with ``compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)``
— twice, the second generation compiling no new graph — and then with the VAE's ``decode`` compiled
as well (``fullgraph=True, dynamic=False``: one graph per latent shape, convolution stacks
included), again twice. Every generation on the device must equal the CPU one.
"""

from __future__ import annotations

import argparse
import json

import torch

from hf_neuron.compat.diffusers.records import checking
from hf_neuron.graphs import count_graphs
from hf_neuron.testing.tiny_pipelines import FAMILIES

PROMPT = "a small red fox in the snow"
STEPS = 4
ATOL = 1e-4


def _generate(pipe, family, embeds: dict, steps: int) -> torch.Tensor:
    output = pipe(**embeds, **family.call_kwargs, num_inference_steps=steps,
                  generator=torch.Generator("cpu").manual_seed(0), output_type="pt")
    images = output.frames if hasattr(output, "frames") else output.images
    return images.detach().float().cpu()


def _to(embeds: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in embeds.items()}


def _diff(reference: torch.Tensor, result: torch.Tensor) -> float:
    torch.testing.assert_close(result, reference, atol=ATOL, rtol=0)
    return (result - reference).abs().max().item()


def compile_vae_decode(vae) -> list[int]:
    """Compile ``vae.decode`` for the neuron backend; returns the list each decode call appends the
    number of graphs it compiled to."""
    compiled = torch.compile(vae.decode, backend="neuron", fullgraph=True, dynamic=False)
    graphs_per_call: list[int] = []

    def decode(*args, **kwargs):
        with count_graphs() as graphs:
            out = compiled(*args, **kwargs)
        graphs_per_call.append(graphs.count)
        return out

    vae.decode = decode  # an instance attribute: the pipeline's ``self.vae.decode(...)`` finds it first
    return graphs_per_call


def check_family(name: str, device: str = "neuron", steps: int = STEPS, compile: bool = True) -> dict:
    family = FAMILIES[name]
    record: dict = {"family": name, "ok": False}
    with checking(record):
        pipe = family.build()
        pipe.set_progress_bar_config(disable=True)
        embeds = family.embeds(pipe, PROMPT)  # text encoder on CPU
        reference = _generate(pipe, family, embeds, steps)
        record["transformer"] = type(pipe.transformer).__name__
        record["output_shape"] = list(reference.shape)

        pipe.transformer.to(device)
        pipe.vae.to(device)
        embeds = _to(embeds, device)
        record["eager_max_abs_diff"] = _diff(reference, _generate(pipe, family, embeds, steps))
        record["eager"] = True

        if compile:
            torch._dynamo.reset()
            pipe.transformer.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
            with count_graphs() as first:
                record["compiled_max_abs_diff"] = _diff(reference, _generate(pipe, family, embeds, steps))
            with count_graphs() as again:
                _generate(pipe, family, embeds, steps)
            record.update(compiled=True, graphs=first.count, graphs_second_generation=again.count)

            decode_graphs = compile_vae_decode(pipe.vae)
            record["vae_compiled_max_abs_diff"] = _diff(reference, _generate(pipe, family, embeds, steps))
            _generate(pipe, family, embeds, steps)
            record.update(vae_compiled=True, vae_decode_graphs=decode_graphs[0],
                          vae_decode_graphs_second_generation=sum(decode_graphs[1:]))
        record["ok"] = not compile or (record["graphs_second_generation"] == 0
                                       and record["vae_decode_graphs_second_generation"] == 0)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import diffusers  # noqa: F401

    records = []
    for name in [f for f in args.families.split(",") if f]:
        record = check_family(name, args.device, compile=not args.no_compile)
        records.append(record)
        summary = {k: v for k, v in record.items() if k != "traceback"}
        status = "PASS " if record["ok"] else "FAIL "
        print(status + json.dumps(summary, default=str)[:700], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "results": records}, f, indent=1)
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
