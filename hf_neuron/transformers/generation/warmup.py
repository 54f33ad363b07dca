"""``warmup(model, batch_sizes=..., max_cache_len=...)``: compile a generation workload's graphs before traffic.

On Trainium a serving process otherwise compiles on its first requests (minutes each). Generation
on Neuron compiles, per (batch size, ``max_cache_len``), one graph per prefill bucket and one decode
graph, whatever the prompt lengths (see :mod:`hf_neuron.transformers.generation.prefill_schedule`), so one
greedy call per batch size and bucket, with a dummy prompt of exactly that bucket's length and two
new tokens, compiles exactly that set. Later requests with any prompt length that fits and a warmed
batch size (or batch bucket) compile nothing; with the compiled-graph cache on disk, a later process
loads the same graphs instead of compiling them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.transformers.generation.defaults import DEFAULT_MAX_CACHE_LEN, resolve_prefill_buckets
from hf_neuron.transformers.generation.prefill_schedule import check_prefill_buckets

logger = logging.getLogger("hf_neuron")

#: New tokens per warm-up call: the first comes from the prefill, the second runs the decode graph.
WARMUP_NEW_TOKENS = 2


@dataclasses.dataclass
class WarmupReport:
    """What a warm-up compiled: graphs handed to the compiler and how many the on-disk cache lacked."""

    batch_sizes: list[int]
    max_cache_len: int
    prefill_buckets: list[int]
    graphs: int
    misses: int | None
    shapes: list[list[int]]

    def summary(self) -> str:
        misses = "unknown" if self.misses is None else str(self.misses)
        return (f"warm-up: {self.graphs} graphs for batch sizes {self.batch_sizes} (max_cache_len="
                f"{self.max_cache_len}, prefill buckets {self.prefill_buckets}); compiled (cache misses): "
                f"{misses}, loaded from the cache: "
                f"{'unknown' if self.misses is None else self.graphs - self.misses}")


def _batch_sizes(batch_sizes) -> list[int]:
    sizes = [batch_sizes] if isinstance(batch_sizes, int) else list(batch_sizes)
    if not sizes or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be positive integers, e.g. [1, 4]; got {batch_sizes!r}")
    return sorted(set(sizes))


def _dummy_token_id(model) -> int:
    config = model.generation_config
    for candidate in (config.pad_token_id, config.eos_token_id, config.bos_token_id):
        if isinstance(candidate, list):
            candidate = candidate[0] if candidate else None
        if candidate is not None:
            return int(candidate)
    return 0


def warmup(
    model,
    batch_sizes: int | Iterable[int] = (1,),
    max_cache_len: int | None = None,
    prefill_chunk_size: int | list[int] | None = None,
    *,
    progress: bool = True,
) -> WarmupReport:
    """Compile the prefill and decode graphs of greedy generation for each batch size.

    ``max_cache_len`` and ``prefill_chunk_size`` (an int or a list of prefill buckets) must be the
    values later ``generate`` calls use (default: the Neuron defaults, 1024 and ``[64, 512]`` capped to
    half of ``max_cache_len``, which ``generate`` also uses when you pass none). ``batch_sizes``: every batch
    size traffic uses, or its ``batch_buckets``. Returns a :class:`WarmupReport`; nothing is generated for the caller.
    """
    from tqdm.auto import tqdm

    from hf_neuron.graphs import count_graphs

    if not model_on_neuron(model):
        raise ValueError(
            f"warmup compiles the graphs of a model on a neuron device; this model is on {getattr(model, 'device', None)}. "
            f"Load it with device_map='neuron' (or model.to('neuron')) first."
        )
    sizes = _batch_sizes(batch_sizes)
    cache_len = int(max_cache_len or DEFAULT_MAX_CACHE_LEN)
    buckets = check_prefill_buckets(resolve_prefill_buckets(prefill_chunk_size, cache_len), cache_len)
    # A bucket the cache cannot follow with a generated token is never run by generate either.
    usable = [b for b in buckets if b + WARMUP_NEW_TOKENS - 1 <= cache_len]
    if not usable:
        default = "" if prefill_chunk_size is not None else " (the default: 64 and 512, at most half the cache)"
        raise ValueError(
            f"prefill_chunk_size={list(buckets)}{default} leaves no room for generated tokens in max_cache_len="
            f"{cache_len}: pass prefill chunk sizes of at most {cache_len - WARMUP_NEW_TOKENS + 1} tokens (the same "
            f"value to generate) or a larger max_cache_len."
        )
    token = _dummy_token_id(model)
    kwargs = {"max_cache_len": cache_len}
    if prefill_chunk_size is not None:
        kwargs["prefill_chunk_size"] = prefill_chunk_size if isinstance(prefill_chunk_size, int) else list(buckets)
    calls = [(batch, chunk) for batch in sizes for chunk in usable]
    with count_graphs() as graphs:
        bar = tqdm(calls, desc="hf_neuron warm-up", unit="graph set", disable=not progress)
        for batch, chunk in bar:
            bar.set_postfix_str(f"batch {batch}: prefill [{batch}, {chunk}] + decode [{batch}, 1]")
            input_ids = torch.full((batch, chunk), token, dtype=torch.long, device=model.device)
            with torch.no_grad():
                model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=WARMUP_NEW_TOKENS,
                    min_new_tokens=WARMUP_NEW_TOKENS,
                    do_sample=False,
                    **kwargs,
                )
        bar.close()
    from hf_neuron.compile_cache import save_dynamo_artifacts

    save_dynamo_artifacts()
    from hf_neuron.simulator.graph_log import input_shape

    shapes = sorted({input_shape(r) for r in graphs.records if input_shape(r)})
    report = WarmupReport(sizes, cache_len, list(usable), graphs.count, graphs.misses, [list(s) for s in shapes])
    logger.info("hf_neuron: %s", report.summary())
    return report


__all__ = ["WarmupReport", "warmup"]
