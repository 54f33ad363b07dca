"""How each diffusers check records one class or pipeline: a failure is a row, never the end of the sweep."""

from __future__ import annotations

import contextlib
import time
import traceback

import torch


def failure(exc: BaseException) -> dict:
    """The error and the end of its traceback, as stored in a result row."""
    return {"error": f"{type(exc).__name__}: {exc}"[:1500], "traceback": traceback.format_exc()[-3000:]}


@contextlib.contextmanager
def checking(record: dict):
    """Run one check into ``record``: an exception is recorded, compiled graphs are forgotten after it,
    and the seconds it took are noted."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:  # reported per row; the sweep goes on
        record.update(failure(exc))
    finally:
        torch._dynamo.reset()
        record["seconds"] = round(time.perf_counter() - started, 2)
