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

A fix may wait for the module it changes (``waits_for``): it is then detected and applied when
that module has been imported, so that ``import transformers`` stays as cheap as upstream's.

Adapters declare fixes with :func:`fix` and change upstream objects only through
:mod:`hf_neuron.patching.attributes`; :func:`apply_fixes` runs those of one library when that library
is imported (see ``hf_neuron.adapters``). ``HF_NEURON_DISABLE=1`` applies none;
``HF_NEURON_DISABLE=name,other`` leaves out the fixes named (a process-wide ``upstream_behaviour``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import sys
from typing import Callable

from hf_neuron.patching.imports import deliver_finished, when_imported

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
    waits_for: str | None = None
    # What the fix applies to, declared where it is registered (hf-neuron check and the compatibility
    # page read it): the model types it exists for (empty: every model of its capability), a modality
    # ("image": vision-language models only) and a layer kind ("sliding_window", "recurrent", "experts").
    model_types: tuple[str, ...] = ()
    modality: str | None = None
    layer_kind: str | None = None
    hooked: bool = dataclasses.field(default=False, repr=False)  # waiting for its module's import
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
    """``HF_NEURON_DISABLE=1``: no fix at all (hf_neuron leaves every library as released)."""
    return os.environ.get("HF_NEURON_DISABLE", "0").lower() in ("1", "true", "yes")


def disabled_fix_names() -> set[str]:
    """``HF_NEURON_DISABLE=name[,name...]``: these fixes only are left out (the others apply)."""
    value = os.environ.get("HF_NEURON_DISABLE", "").strip()
    if value.lower() in ("", "0", "1", "true", "yes", "false", "no"):
        return set()
    return {name.strip() for name in value.split(",") if name.strip()}


#: The modalities and layer kinds a fix may be declared for.
MODALITIES = ("image",)
LAYER_KINDS = ("sliding_window", "recurrent", "experts")


def fix(name: str, library: str, detect: Callable[[], object], *, waits_for: str | None = None,
        model_types: tuple[str, ...] = (), modality: str | None = None, layer_kind: str | None = None):
    """Decorator registering ``apply`` as the fix ``name`` for ``library``.

    The decorated function's docstring is the fix's description of the upstream gap.
    ``detect()`` returns True when the gap exists (so the fix is needed), False when upstream
    closes it, :data:`PENDING` when it cannot run yet; raising means "cannot tell". With
    ``waits_for``, both run once that module has been imported. ``model_types``, ``modality`` and
    ``layer_kind`` declare what the fix applies to (see :class:`Fix`).
    """
    if modality not in (None, *MODALITIES) or layer_kind not in (None, *LAYER_KINDS):
        raise ValueError(f"fix {name}: modality must be one of {MODALITIES}, layer_kind one of {LAYER_KINDS}")

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        gap = " ".join((apply.__doc__ or "").strip().split("\n\n")[0].split())
        _FIXES[name] = Fix(name=name, library=library, gap=gap, detect=detect, apply=apply, waits_for=waits_for,
                           model_types=tuple(model_types), modality=modality, layer_kind=layer_kind)
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
    if name in _FIXES:
        set_status(name, CLOSED, reason)


def mark_unknown(name: str, what: str, exc: BaseException) -> None:
    """Record that ``what`` (a check made after detection, e.g. at first use) could not decide ``name``:
    the fix is not applied, a warning is logged once and ``hf-neuron env --check`` fails."""
    _mark_unknown(_FIXES[name], what, exc)


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
    if entry.name in disabled_fix_names():
        entry.status, entry.reason = DISABLED, f"HF_NEURON_DISABLE={os.environ['HF_NEURON_DISABLE']}"
        return
    try:
        with _host_default_device():
            needed = entry.detect()
    except Exception as exc:  # a broken detector must never break the user's import
        _mark_unknown(entry, "detection", exc)
        return
    if needed is PENDING:
        return
    if not needed:
        entry.status, entry.reason = CLOSED, "upstream already closes this gap"
        return
    before = (entry.status, entry.reason)
    try:
        entry.apply()
    except Exception as exc:
        _mark_unknown(entry, "applying the fix", exc)
        return
    if (entry.status, entry.reason) != before:
        return  # the apply function decided itself (e.g. upstream's value seen on the live class)
    entry.status, entry.reason = APPLIED, "applied"
    logger.info("hf_neuron: applied fix %s (%s)", entry.name, entry.gap)


@contextlib.contextmanager
def _host_default_device():
    """Detectors build small upstream objects; the import that triggers them may happen inside the
    caller's ``with torch.device("meta"):`` (model initialisation)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "device"):
        yield
        return
    with torch.device("cpu"):
        yield


def _decide_when_imported(entry: Fix) -> None:
    if entry.hooked:
        return
    entry.hooked = True
    if not entry.decided:
        entry.reason = f"waits for `import {entry.waits_for}`"
    when_imported(entry.waits_for, lambda _module: decide(entry))


def apply_fixes(library: str) -> list[Fix]:
    """Detect every undecided fix of ``library`` and apply those whose gap exists; returns those applied
    by this call. Idempotent.

    A fix that waits for a module is decided when that module has been imported (now, if it is).
    """
    applied = []
    for entry in list(_FIXES.values()):
        if entry.library != library or entry.decided:
            continue
        if entry.waits_for is None or adapters_disabled():
            decide(entry)  # under HF_NEURON_DISABLE: marked disabled, no import hook installed
        else:
            _decide_when_imported(entry)
        if entry.active:
            applied.append(entry)
    return applied


def import_targets(library: str) -> None:
    """Import every module a fix of ``library`` waits for, so that all of them are decided.

    Fixes otherwise wait for their module's import (keeping the library's import cheap); tools that
    report the fixes (``hf-neuron env``) call this first. Deferred import callbacks are delivered
    first: an adapter's fixes are declared by one of them (once the adapter's module has finished
    importing), and a fix not declared yet has no module to import.
    """
    deliver_finished()
    apply_fixes(library)
    for module in sorted({f.waits_for for f in _FIXES.values() if f.library == library and f.waits_for}):
        importlib.import_module(module)
    deliver_finished()
    apply_fixes(library)


def set_status(name: str, status: str, reason: str) -> None:
    """Record the outcome of a fix decided outside its detector (e.g. per class, when a module loads)."""
    if status not in (APPLIED, CLOSED, UNKNOWN, WAITING, DISABLED):
        raise ValueError(f"unknown fix status {status!r}")
    _FIXES[name].status, _FIXES[name].reason = status, reason


@contextlib.contextmanager
def scratch_registry():
    """An empty registry for the block (tests declaring throw-away fixes); the real one comes back after."""
    global _FIXES, _warned_unknown
    saved = _FIXES, _warned_unknown
    _FIXES, _warned_unknown = {}, set()
    try:
        yield
    finally:
        _FIXES, _warned_unknown = saved
