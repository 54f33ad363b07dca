"""Registry of the adapters' *fixes*.

A fix is a small named patch that closes one upstream gap for Neuron users. Each one says which
gap it fills, detects whether the gap exists in the installed library (feature detection, never
version strings), and applies the smallest patch that closes it. ``hf-neuron env`` lists them.

Detection has three outcomes, and the third is never quiet:

- the gap exists: the fix is applied (status ``applied``);
- upstream already closes it: nothing is patched (status ``closed``);
- the detector cannot tell (it raised, typically because an upstream release changed what it
  exercises): nothing is patched, a warning naming the fix and the installed release is logged
  once per process, ``hf-neuron env`` shows ``unknown`` and ``hf-neuron env --check`` fails.

A detector may also return :data:`PENDING` when it cannot run yet (the module it inspects is not
imported); the fix is detected again at the next :func:`apply_fixes`.

Adapters declare fixes with :func:`fix`; :func:`apply_fixes` runs those of one library when that
library is imported (see ``hf_neuron._import_hooks``). ``HF_NEURON_DISABLE=1`` applies none.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

logger = logging.getLogger("hf_neuron")

#: Returned by a detector that cannot run yet; the fix stays pending and is detected again later.
PENDING = object()

APPLIED = "applied"
CLOSED = "closed"
UNKNOWN = "unknown"
WAITING = "pending"
DISABLED = "disabled"


@dataclasses.dataclass
class Fix:
    name: str
    library: str
    gap: str
    detect: Callable[[], object]
    apply: Callable[[], None]
    status: str = WAITING
    reason: str = "not applied yet (library not imported)"

    @property
    def active(self) -> bool:
        return self.status == APPLIED

    @property
    def decided(self) -> bool:
        return self.status in (APPLIED, CLOSED, UNKNOWN)


_FIXES: dict[str, Fix] = {}
_warned_unknown: set[str] = set()


def adapters_disabled() -> bool:
    return os.environ.get("HF_NEURON_DISABLE", "0").lower() in ("1", "true", "yes")


def fix(name: str, library: str, detect: Callable[[], object]):
    """Decorator registering ``apply`` as the fix ``name`` for ``library``.

    The decorated function's docstring is the fix's description of the upstream gap.
    ``detect()`` returns True when the gap exists (so the fix is needed), False when upstream
    closes it, :data:`PENDING` when it cannot run yet; raising means "cannot tell".
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


def unknown_fixes() -> list[Fix]:
    """Fixes whose detector could not decide on the installed releases (they are not applied)."""
    return [f for f in _FIXES.values() if f.status == UNKNOWN]


def mark_closed(name: str, reason: str) -> None:
    """Record that upstream closes the gap of ``name`` (for fixes decided outside their detector)."""
    entry = _FIXES.get(name)
    if entry is not None:
        entry.status, entry.reason = CLOSED, reason


def mark_waiting(name: str, reason: str) -> None:
    """Record why the still-undecided fix ``name`` is not decided yet (shown by ``hf-neuron env``)."""
    entry = _FIXES.get(name)
    if entry is not None and not entry.decided:
        entry.status, entry.reason = WAITING, reason


def _mark_unknown(entry: Fix, what: str, exc: BaseException) -> None:
    from hf_neuron.versions import installed_version, verified_ranges

    version = installed_version(entry.library) or "(not installed)"
    verified = verified_ranges().get(entry.library)
    entry.status = UNKNOWN
    entry.reason = f"{what} failed on {entry.library} {version}: {exc!r}"
    if entry.name not in _warned_unknown:
        _warned_unknown.add(entry.name)
        logger.warning(
            "hf_neuron: cannot tell whether fix %s is needed on %s %s (%s raised %r), so it is NOT applied. "
            "hf_neuron is verified on %s%s; `hf-neuron env --check` fails until this is resolved.",
            entry.name,
            entry.library,
            version,
            what,
            exc,
            entry.library,
            verified or " (no declared range)",
        )


def decide(entry: Fix) -> None:
    """Run ``entry``'s detector if it is undecided, and apply the fix when the gap exists."""
    if entry.decided:
        return
    if adapters_disabled():
        entry.status, entry.reason = DISABLED, "HF_NEURON_DISABLE=1"
        return
    try:
        needed = entry.detect()
    except Exception as exc:  # a broken detector must never break the user's import
        _mark_unknown(entry, "detection", exc)
        return
    if needed is PENDING:
        return
    if not needed:
        entry.status, entry.reason = CLOSED, "upstream already closes this gap"
        return
    try:
        entry.apply()
    except Exception as exc:
        _mark_unknown(entry, "applying the fix", exc)
        return
    entry.status, entry.reason = APPLIED, "applied"
    logger.info("hf_neuron: applied fix %s (%s)", entry.name, entry.gap)


def apply_fixes(library: str) -> list[Fix]:
    """Detect every undecided fix of ``library`` and apply those whose gap exists. Idempotent."""
    applied = []
    for entry in list(_FIXES.values()):
        if entry.library != library or entry.decided:
            continue
        decide(entry)
        if entry.active:
            applied.append(entry)
    return applied
