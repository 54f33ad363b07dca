"""A record of every graph handed to the ``"neuron"`` Dynamo backend.

On Trainium each graph is a neuronx-cc compile (minutes for a large model), so the number of
graphs is the number to keep down: tests assert it. Records are kept in-process and, when
``HF_NEURON_GRAPH_LOG`` names a file, appended to it as one JSON line per record, so a test can
count graphs compiled by every torchrun worker::

    with graph_log.count_graphs() as graphs:
        model(x); model(y)
    assert graphs.count == 1

    graph_log.read_log(path)        # records of all processes that wrote to ``path``

A record of kind ``"graph"`` is written for each Dynamo graph handed to the backend (one per
compile, including compiles that were rejected or fell back to eager: each costs a compile on the
device). Its keys: ``kind, pid, rank, index`` (per-process count, never reused by ``reset()``),
``status`` (``"compiled"``, ``"fallback"`` or ``"rejected"``), ``node_count`` (nodes of the Dynamo
graph), ``inputs`` (``[shape, dtype]`` per graph input; ``[None, type name]`` for non-tensors),
``names`` (the graph's placeholder names, in input order), ``device``, ``ops`` (sorted ATen ops of
the forward graph), ``forward_nodes``, ``backward`` (whether a backward graph will be compiled),
``mode``, ``error``, ``time``, and ``cache``: ``"hit"`` when the persistent compiled-graph cache had
the graph (on Trainium: the NEFF was loaded, no neuronx-cc run), else ``"miss"``, with its
``cache_key``. AOTAutograd
compiles the backward graph at the first ``.backward()``; it then adds a record of kind
``"backward"`` with ``graph_index`` (the forward's ``index``), ``node_count`` and ``ops``, and
fills ``backward_nodes`` / ``backward_ops`` on the in-process forward record.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

LOG_ENV = "HF_NEURON_GRAPH_LOG"

_lock = threading.Lock()
_records: list[dict[str, Any]] = []
_next_index = 0


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _append_to_file(record: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    # One write() on an O_APPEND descriptor: lines from several processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def record_graph(**fields: Any) -> dict[str, Any]:
    """Add a ``"graph"`` record (called by the backend). Returns the in-process record."""
    global _next_index
    with _lock:
        record = {
            "kind": "graph",
            "pid": os.getpid(),
            "rank": _rank(),
            "index": _next_index,
            "time": time.time(),
        }
        _next_index += 1
        record.update(fields)
        _records.append(record)
        _append_to_file(record)
    return record


def record_backward(graph_record: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """Add a ``"backward"`` record for the graph ``graph_record`` (called by the backend)."""
    with _lock:
        record = {
            "kind": "backward",
            "pid": os.getpid(),
            "rank": _rank(),
            "graph_index": graph_record["index"],
            "time": time.time(),
        }
        record.update(fields)
        graph_record["backward_nodes"] = fields.get("node_count")
        graph_record["backward_ops"] = fields.get("ops")
        _records.append(record)
        _append_to_file(record)
    return record


def records(kind: str | None = "graph") -> list[dict[str, Any]]:
    """This process's records since the last :func:`reset` (all kinds when ``kind`` is None)."""
    with _lock:
        return [dict(r) for r in _records if kind is None or r["kind"] == kind]


def graph_count() -> int:
    """Number of graphs handed to the backend in this process since the last :func:`reset`."""
    with _lock:
        return sum(1 for r in _records if r["kind"] == "graph")


def reset() -> None:
    """Forget this process's records (the log file is left alone; indices keep increasing)."""
    with _lock:
        _records.clear()


def input_shape(record: dict[str, Any], name: str = "input_ids") -> tuple[int, ...] | None:
    """The shape of the record's graph input whose placeholder name contains ``name``, or None."""
    for placeholder, (shape, _dtype) in zip(record.get("names") or (), record.get("inputs") or ()):
        if name in placeholder and shape is not None:
            return tuple(shape)
    return None


def read_log(path: str | os.PathLike[str] | None = None, kind: str | None = "graph") -> list[dict[str, Any]]:
    """Records appended to ``path`` (default ``$HF_NEURON_GRAPH_LOG``) by every process.

    A missing file means no graph was compiled and gives ``[]``.
    """
    if path is None:
        path = os.environ.get(LOG_ENV)
        if not path:
            raise ValueError(f"no path given and {LOG_ENV} is not set")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a graph-log JSON line: {line[:80]!r}") from e
        if kind is None or record.get("kind") == kind:
            out.append(record)
    return out


class GraphCounter:
    """What :func:`count_graphs` yields: ``count`` and ``records`` of graphs compiled in the block."""

    def __init__(self) -> None:
        with _lock:
            self._start = _next_index
        self._frozen: list[dict[str, Any]] | None = None

    def _select(self) -> list[dict[str, Any]]:
        return [r for r in records("graph") if r["index"] >= self._start and r["pid"] == os.getpid()]

    @property
    def records(self) -> list[dict[str, Any]]:
        return list(self._frozen) if self._frozen is not None else self._select()

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def misses(self) -> int:
        """Graphs of the block that the persistent cache did not have: the compiles a device would run."""
        return sum(1 for r in self.records if r.get("cache") != "hit")

    def _freeze(self) -> None:
        self._frozen = self._select()

    def __repr__(self) -> str:
        return f"GraphCounter(count={self.count}, misses={self.misses})"


@contextlib.contextmanager
def count_graphs() -> Iterator[GraphCounter]:
    """Count the graphs compiled in this process inside the ``with`` block."""
    counter = GraphCounter()
    try:
        yield counter
    finally:
        counter._freeze()
