"""Count the graphs compiled inside a ``with`` block, on the simulator and on real Trainium alike.

Every graph handed to a Dynamo backend is one neuronx-cc compile on Trainium, so checks, tests and
benchmarks count them. The simulator keeps its own log of the graphs its ``"neuron"`` backend
received (:mod:`hf_neuron.simulator.graph_log`, with per-graph records); real Trainium has no such
log, but Dynamo counts the unique graphs it produced for any backend. One counter picks the first
when the simulator is active and the second otherwise, so the same check runs in both places::

    with count_graphs() as graphs:
        model(x)
    graphs.count        # final once the block has exited
    graphs.misses       # graphs the persistent compiled-graph cache did not have (real compiles)
    graphs.records      # the simulator's per-graph records ([] without the simulator)

Misses come from the simulator's records (``cache: "hit"/"miss"``); on Trainium from the entries
that appeared in the NEFF cache directory during the block (None when no directory is known).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hf_neuron.compile_cache import entry_names


def _simulated() -> bool:
    try:
        from hf_neuron.simulator import is_simulated
    except ImportError:
        return False
    return is_simulated()


def _dynamo_unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompiledGraphs:
    """What :func:`count_graphs` yields. ``source`` says which count it reads:
    ``"graph_log"`` (the simulator) or ``"dynamo"``."""

    def __init__(self, source: str, log_counter=None) -> None:
        self.source = source
        self._log_counter = log_counter
        self._dynamo_start = _dynamo_unique_graphs() if log_counter is None else 0
        self._entries_start = None if log_counter is not None else entry_names()
        self._final: int | None = None
        self._final_misses: int | None = None

    @property
    def count(self) -> int:
        if self._final is not None:
            return self._final
        if self._log_counter is not None:
            return int(self._log_counter.count)
        return _dynamo_unique_graphs() - self._dynamo_start

    @property
    def misses(self) -> int | None:
        if self._final_misses is not None:
            return self._final_misses
        if self._log_counter is not None:
            return int(self._log_counter.misses)
        if self._entries_start is None:
            return None
        return len((entry_names() or set()) - self._entries_start)

    @property
    def records(self) -> list[dict[str, Any]]:
        return list(self._log_counter.records) if self._log_counter is not None else []

    def __repr__(self) -> str:
        return f"CompiledGraphs(count={self.count}, misses={self.misses}, source={self.source!r})"


@contextlib.contextmanager
def count_graphs() -> Iterator[CompiledGraphs]:
    """Graphs compiled in this process inside the block: the simulator's graph log when the simulator
    is active, else the difference of Dynamo's ``unique_graphs`` counter (any backend)."""
    with contextlib.ExitStack() as stack:
        if _simulated():
            from hf_neuron.simulator import graph_log

            counted = CompiledGraphs("graph_log", stack.enter_context(graph_log.count_graphs()))
        else:
            counted = CompiledGraphs("dynamo")
        try:
            yield counted
        finally:
            stack.close()  # the graph log freezes its records here
            counted._final = counted.count
            counted._final_misses = counted.misses
