"""Registry of the adapters' *fixes*.

A fix is a small named patch that closes one upstream gap for Neuron users. Each one says which
gap it fills, detects whether the gap exists in the installed library (feature detection, never
version strings), and applies the smallest patch that closes it. ``hf-neuron env`` lists them.

Adapters declare fixes with :func:`fix`; :func:`apply_fixes` runs those of one library when that
library is imported (see ``hf_neuron._import_hooks``). ``HF_NEURON_DISABLE=1`` applies none.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

logger = logging.getLogger("hf_neuron")


@dataclasses.dataclass
class Fix:
    name: str
    library: str
    gap: str
    detect: Callable[[], bool]
    apply: Callable[[], None]
    active: bool = False
    reason: str = "not applied yet (library not imported)"


_FIXES: dict[str, Fix] = {}


def adapters_disabled() -> bool:
    return os.environ.get("HF_NEURON_DISABLE", "0").lower() in ("1", "true", "yes")


def fix(name: str, library: str, detect: Callable[[], bool]):
    """Decorator registering ``apply`` as the fix ``name`` for ``library``.

    The decorated function's docstring is the fix's description of the upstream gap.
    ``detect()`` returns True when the gap exists (so the fix is needed).
    """

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        gap = (apply.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        _FIXES[name] = Fix(name=name, library=library, gap=gap, detect=detect, apply=apply)
        return apply

    return register


def all_fixes() -> list[Fix]:
    return list(_FIXES.values())


def get_fix(name: str) -> Fix:
    return _FIXES[name]


def apply_fixes(library: str) -> list[Fix]:
    """Apply every registered fix of ``library`` whose gap is detected. Idempotent."""
    applied = []
    for f in _FIXES.values():
        if f.library != library or f.active:
            continue
        if adapters_disabled():
            f.reason = "HF_NEURON_DISABLE=1"
            continue
        try:
            needed = f.detect()
        except Exception as exc:  # a broken detector must never break the user's import
            f.reason = f"detection failed: {exc!r}"
            logger.warning("hf_neuron: could not detect gap for fix %s: %r", f.name, exc)
            continue
        if not needed:
            f.reason = "upstream already closes this gap"
            continue
        f.apply()
        f.active = True
        f.reason = "applied"
        applied.append(f)
        logger.info("hf_neuron: applied fix %s (%s)", f.name, f.gap)
    return applied
