"""The hand-over between a benchmark script and the documentation's tables.

A benchmark ends its output with a marker line and then the Markdown rows of its table, exactly as
the docs page shows them; ``tests/benchmarks`` re-runs the cheap rows and compares them with the
page. Both sides use this module, so the marker is written in one place.
"""

from __future__ import annotations

from typing import Iterable

MARKER = "Table rows:"


def print_table_rows(rows: Iterable[str]) -> None:
    """Print the marker, then one documented table row per line (after a blank line)."""
    print()
    print(MARKER)
    for row in rows:
        print(row)


def split_table_rows(output: str) -> tuple[str, list[str]]:
    """``(what the script printed before its rows, the rows)``; a clear error when there are none."""
    if MARKER not in output:
        raise ValueError(f"the benchmark printed no {MARKER!r} line; its output ends:\n{output[-2000:]}")
    before, after = output.split(MARKER, 1)
    return before, after.strip().splitlines()
