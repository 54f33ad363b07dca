#!/usr/bin/env python
"""Graphs compiled by greedy generation on Neuron: upstream Transformers vs with hf_neuron, one run.

The workload of ``hf_neuron.testing.generation_workload``: 8 prompts of 20-140 tokens,
``max_cache_len=256``, ``prefill_chunk_size=32``, 16 new tokens, on a tiny random Llama ("dense") and
a tiny Mistral with a 64-token sliding window ("sliding"), batch size 1 (8 calls) and 4 (2 calls).
Each configuration runs three times in this process, from an empty Dynamo cache:

- ``upstream``: Transformers as released (hf_neuron's fixes switched off in-process, the equivalent
  of ``HF_NEURON_DISABLE=1``) with the whole recipe typed by hand - static cache, cache length,
  chunk size, ``CompileConfig(backend="neuron", fullgraph=False, dynamic=False, mode="default")`` -
  and prompts left padded to a multiple of the chunk size;
- ``upstream-unpadded``: the same without padding to a multiple of the chunk size;
- ``hf_neuron``: the same model and prompts (padded to the longest prompt only) with
  ``generate(max_cache_len=256, prefill_chunk_size=32)``: the rest is hf_neuron's defaults.

It prints the graphs handed to the "neuron" backend (each one is a neuronx-cc compile on Trainium,
minutes for a large model), the wall time, the ratios, and whether the greedy tokens equal CPU eager
generation. Dynamo's ``recompile_limit`` is raised (``--recompile-limit``) so that the count is the
number of graphs the workload needs: with the default of 8, Dynamo gives up and runs the rest
eagerly. On the simulator a graph compiles in seconds; the ratio of graphs is what carries over.

    HF_NEURON_SIMULATOR=1 python benchmarks/generation_graphs.py [--kinds dense sliding] [--batch-sizes 1 4]

It ends with the rows of the table in ``docs/transformers.md`` (``tests/benchmarks`` checks the committed rows against a
fresh run of the dense model).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_NEURON_SIMULATOR", "1")

import torch  # noqa: E402
from transformers import CompileConfig  # noqa: E402

from hf_neuron.graphs import count_graphs  # noqa: E402
from hf_neuron.testing import generation_workload as w  # noqa: E402
from hf_neuron.testing.benchmark_tables import print_table_rows  # noqa: E402
from hf_neuron.transformers import upstream_behaviour  # noqa: E402


def measure(model, prompts, batch_size, expected, **kwargs):
    torch._dynamo.reset()
    start = time.perf_counter()
    with count_graphs() as graphs:
        tokens = w.generate_batches(model, prompts, batch_size, **kwargs)
    seconds = time.perf_counter() - start
    same = all(torch.equal(a, b) for a, b in zip(tokens, expected))
    return graphs.count, seconds, same


MODEL_NAMES = {"dense": "tiny Llama", "sliding": "tiny Mistral, window 64"}
RUNS = ("upstream", "upstream-unpadded", "hf_neuron")


def readme_row(kind: str, batch_size: int, graphs: dict[str, int], recompile_limit: int) -> str:
    """One row of the table in ``docs/transformers.md``: graphs per run, ``≥ limit`` where Dynamo stopped compiling."""

    def cell(run: str) -> str:
        count = graphs[run]
        text = f"≥ {recompile_limit} (recompile limit)" if count >= recompile_limit else str(count)
        return f"**{text}**" if run == "hf_neuron" else text

    return f"| {MODEL_NAMES[kind]} | {batch_size} | " + " | ".join(cell(run) for run in RUNS) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", default=["dense", "sliding"], choices=["dense", "sliding"])
    w.add_benchmark_arguments(parser)
    args = parser.parse_args(argv)

    if not w.start_benchmark(args):
        return 2

    recipe = w.compiled_recipe()
    seed_compile = CompileConfig(backend="neuron", fullgraph=False, dynamic=False, mode="default")
    seed_recipe = dict(recipe, compile_config=seed_compile)

    header = f"{'model':8} {'batch':>5} | {'run':18} {'graphs':>6} {'seconds':>8} {'tokens==CPU':>11}"
    print(header)
    print("-" * len(header))
    summary = []
    rows = []
    for kind in args.kinds:
        for batch_size in args.batch_sizes:
            model = w.tiny_workload_model(kind)
            prompts = w.workload_prompts(model.config.vocab_size)
            expected = w.generate_batches(model, prompts, batch_size)  # CPU eager, dynamic cache
            model.to("neuron")
            runs = {}
            with upstream_behaviour():
                runs["upstream"] = measure(
                    model, prompts, batch_size, expected, pad_multiple=w.PREFILL_CHUNK_SIZE, **seed_recipe
                )
                runs["upstream-unpadded"] = measure(model, prompts, batch_size, expected, **seed_recipe)
            runs["hf_neuron"] = measure(
                model, prompts, batch_size, expected,
                max_cache_len=w.MAX_CACHE_LEN, prefill_chunk_size=w.PREFILL_CHUNK_SIZE,
            )
            for name, (graphs, seconds, same) in runs.items():
                print(f"{kind:8} {batch_size:>5} | {name:18} {graphs:>6} {seconds:>8.1f} {str(same):>11}")
            up_graphs, up_seconds, _ = runs["upstream"]
            ours_graphs, ours_seconds, _ = runs["hf_neuron"]
            summary.append((kind, batch_size, up_graphs / max(ours_graphs, 1), up_seconds / ours_seconds))
            rows.append(readme_row(kind, batch_size, {run: runs[run][0] for run in RUNS}, args.recompile_limit))
            del model

    print()
    print("upstream (the recipe as announced) / hf_neuron:")
    for kind, batch_size, graph_ratio, time_ratio in summary:
        print(f"  {kind:8} batch {batch_size}: {graph_ratio:.1f}x graphs, {time_ratio:.2f}x wall time")
    print_table_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
