#!/usr/bin/env python
"""Graphs compiled and prefill positions computed for a realistic prompt-length mix, one run.

Prompts of 5-1000 tokens drawn log-uniformly (most are short, a few fill most of the cache), greedy
generation of 8 new tokens with a static cache of 1024 on a tiny random Llama, batch size 1 and 4
(a batch is left padded to its longest prompt, as a tokenizer does). Each configuration runs from
an empty Dynamo cache:

- ``upstream recipe``: Transformers as released (hf_neuron's fixes off, the equivalent of
  ``HF_NEURON_DISABLE=1``) with the announcement's hand-typed recipe: static cache,
  ``max_cache_len=1024``, ``prefill_chunk_size=512``, a "neuron" ``CompileConfig``;
- ``one chunk 512``: hf_neuron with ``prefill_chunk_size=512`` (one prefill bucket);
- ``buckets 64,512`` (hf_neuron's default) and other bucket sets: ``prefill_chunk_size=[...]``.

It prints the graphs handed to the "neuron" backend per batch size (each is a neuronx-cc compile of
minutes on Trainium), the prefill positions the device computed (counted at every forward of the
prefill, padding and re-run positions included) divided by the prompt tokens as the batch arrives
(rows x longest prompt), and whether the greedy tokens equal CPU eager generation.

    HF_NEURON_SIMULATOR=1 python benchmarks/prefill_buckets.py [--prompts 24] [--batch-sizes 1 4] [--only NAME ...]

It ends with the rows of the table in ``docs/transformers.md`` (``tests/benchmarks`` checks them against a fresh run).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from unittest import mock

os.environ.setdefault("HF_NEURON_SIMULATOR", "1")

import torch  # noqa: E402
from transformers import CompileConfig  # noqa: E402
from transformers.generation.utils import GenerationMixin  # noqa: E402

from hf_neuron.graphs import count_graphs  # noqa: E402
from hf_neuron.testing import generation_workload as w  # noqa: E402
from hf_neuron.testing.benchmark_tables import print_table_rows  # noqa: E402
from hf_neuron.transformers import upstream_behaviour  # noqa: E402

MAX_CACHE_LEN = 1024
NEW_TOKENS = 8
SHORTEST, LONGEST = 5, 1000
#: (name, generate keywords, hf_neuron's fixes on)
CONFIGURATIONS = (
    ("upstream recipe", {"cache_implementation": "static", "prefill_chunk_size": 512,
                         "compile_config": CompileConfig(backend="neuron", fullgraph=False, dynamic=False,
                                                         mode="default")}, False),
    ("one chunk 512", {"prefill_chunk_size": 512}, True),
    ("buckets 64,512 (default)", {}, True),
    ("buckets 128,512", {"prefill_chunk_size": [128, 512]}, True),
    ("buckets 32,128,512", {"prefill_chunk_size": [32, 128, 512]}, True),
)


def prompt_lengths(count: int, seed: int = 0) -> list[int]:
    """``count`` lengths drawn log-uniformly between 5 and 1000 tokens."""
    generator = torch.Generator().manual_seed(seed)
    uniform = torch.rand(count, generator=generator, dtype=torch.float64)
    return [round(math.exp(math.log(SHORTEST) + u * (math.log(LONGEST) - math.log(SHORTEST)))) for u in uniform.tolist()]


class PrefillPositions:
    """Counts the token positions of every forward ``generate`` runs during its prefill."""

    def __init__(self, model):
        self.positions = 0
        self._in_prefill = False
        self._model_class = type(model)

    @contextlib.contextmanager
    def counting(self):
        prefill, prepare = GenerationMixin._prefill, self._model_class.prepare_inputs_for_generation

        def counted_prefill(model, *args, **kwargs):
            self._in_prefill = True
            try:
                return prefill(model, *args, **kwargs)
            finally:
                self._in_prefill = False

        def counted_prepare(model, *args, **kwargs):
            inputs = prepare(model, *args, **kwargs)
            if self._in_prefill and inputs.get("input_ids") is not None:
                self.positions += inputs["input_ids"].numel()
            return inputs

        with mock.patch.object(GenerationMixin, "_prefill", counted_prefill), \
                mock.patch.object(self._model_class, "prepare_inputs_for_generation", counted_prepare):
            yield self


def measure(model, prompts, batch_size, expected, fixes_on: bool, **kwargs):
    """(graphs, prefill positions / prompt tokens, tokens equal CPU) of one configuration."""
    torch._dynamo.reset()
    arriving = sum(len(batch) * max(len(p) for p in batch)
                   for batch in (prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)))
    counter = PrefillPositions(model)
    switch = contextlib.nullcontext() if fixes_on else upstream_behaviour()
    with switch, count_graphs() as graphs, counter.counting():
        tokens = w.generate_batches(model, prompts, batch_size, max_new_tokens=NEW_TOKENS,
                                    max_cache_len=MAX_CACHE_LEN, **kwargs)
    same = all(torch.equal(a, b) for a, b in zip(tokens, expected))
    return graphs.count, counter.positions / arriving, same


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=24, help="prompts in the mix (default: 24)")
    w.add_benchmark_arguments(parser)
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[c[0] for c in CONFIGURATIONS],
                        help="run these configurations only (default: all)")
    args = parser.parse_args(argv)

    if not w.start_benchmark(args):
        return 2

    model = w.tiny_workload_model("dense")
    lengths = prompt_lengths(args.prompts)
    prompts = w.workload_prompts(model.config.vocab_size, lengths)
    print(f"{len(lengths)} prompts of {min(lengths)}-{max(lengths)} tokens (median {sorted(lengths)[len(lengths) // 2]}), "
          f"{NEW_TOKENS} new tokens, max_cache_len={MAX_CACHE_LEN}")
    expected = {b: w.generate_batches(model, prompts, b, max_new_tokens=NEW_TOKENS) for b in args.batch_sizes}
    model.to("neuron")

    header = f"{'configuration':26} {'batch':>5} | {'graphs':>6} {'positions/prompt':>16} {'tokens==CPU':>11}"
    print(header)
    print("-" * len(header))
    rows = []
    for name, kwargs, fixes_on in CONFIGURATIONS:
        if args.only and name not in args.only:
            continue
        cells = []
        for batch_size in args.batch_sizes:
            graphs, ratio, same = measure(model, prompts, batch_size, expected[batch_size], fixes_on, **kwargs)
            print(f"{name:26} {batch_size:>5} | {graphs:>6} {ratio:>16.2f} {str(same):>11}")
            limit = f"≥ {args.recompile_limit}" if graphs >= args.recompile_limit else str(graphs)
            cells.append(f"{limit} | {ratio:.2f}x")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    print_table_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
