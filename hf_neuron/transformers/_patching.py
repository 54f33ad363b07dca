"""How the Transformers fixes patch upstream objects, and how a process gets upstream behaviour back.

Every patch belongs to one named fix. Several fixes may wrap the same method: each contributes a
wrapper ``wrapper(original, *args, **kwargs)`` and the installed attribute is the chain of the
wrappers of the fixes currently enabled. :func:`upstream_behaviour` restores the original
attributes for some or all fixes (and re-installs ours on exit), so that a test or a benchmark can
measure the same workload with and without a fix in one process - the in-process equivalent of
``HF_NEURON_DISABLE=1``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

_MISSING = object()
_lock = threading.RLock()


class _Site:
    """One patched attribute (``owner.attr``) or mapping entry (``owner[attr]``)."""

    def __init__(self, owner: Any, attr: str, mapping: bool):
        self.owner = owner
        self.attr = attr
        self.mapping = mapping
        if mapping:
            self.original = owner.get(attr, _MISSING)
        else:
            self.original = vars(owner).get(attr, _MISSING) if isinstance(owner, type) else getattr(owner, attr)
        self.wrappers: list[tuple[str, Callable]] = []
        self.replacement: tuple[str, Any] | None = None

    def _set(self, value: Any) -> None:
        if self.mapping:
            if value is _MISSING:
                self.owner.pop(self.attr, None)
            else:
                self.owner[self.attr] = value
        elif value is _MISSING:
            if self.attr in vars(self.owner):
                delattr(self.owner, self.attr)
        else:
            setattr(self.owner, self.attr, value)

    def install(self, disabled: set[str]) -> None:
        if self.replacement is not None and self.replacement[0] not in disabled:
            self._set(self.replacement[1])
            return
        value = self.original
        for fix_name, wrapper in self.wrappers:
            if fix_name in disabled:
                continue
            if value is _MISSING:
                raise RuntimeError(f"hf_neuron: cannot wrap {self.attr!r}: the owner does not define it")
            value = _chain(value, wrapper)
        self._set(value)


def _chain(inner: Callable, wrapper: Callable) -> Callable:
    @functools.wraps(inner)
    def patched(*args, **kwargs):
        return wrapper(inner, *args, **kwargs)

    patched.__hf_neuron_wrapped__ = inner
    return patched


_sites: dict[tuple[int, str, bool], _Site] = {}
_disabled: set[str] = set()


def _site(owner: Any, attr: str, mapping: bool) -> _Site:
    key = (id(owner), attr, mapping)
    site = _sites.get(key)
    if site is None:
        site = _sites[key] = _Site(owner, attr, mapping)
    return site


def wrap(fix_name: str, owner: Any, attr: str, wrapper: Callable, *, mapping: bool = False) -> None:
    """Wrap ``owner.attr`` (``owner[attr]`` when ``mapping``) with ``wrapper(original, *args, **kwargs)``."""
    with _lock:
        site = _site(owner, attr, mapping)
        if any(name == fix_name for name, _ in site.wrappers):
            return
        site.wrappers.append((fix_name, wrapper))
        site.install(_disabled)


def replace(fix_name: str, owner: Any, attr: str, value: Any) -> None:
    """Set ``owner.attr = value`` for ``fix_name`` (for class attributes such as properties)."""
    with _lock:
        site = _site(owner, attr, False)
        site.replacement = (fix_name, value)
        site.install(_disabled)


def patched_fix_names() -> set[str]:
    with _lock:
        names = {name for site in _sites.values() for name, _ in site.wrappers}
        names |= {site.replacement[0] for site in _sites.values() if site.replacement is not None}
        return names


@contextlib.contextmanager
def upstream_behaviour(*fix_names: str) -> Iterator[None]:
    """Run the block with upstream Transformers for ``fix_names`` (all our fixes when none given)."""
    with _lock:
        names = set(fix_names) if fix_names else patched_fix_names()
        previous = set(_disabled)
        _disabled.update(names)
        for site in _sites.values():
            site.install(_disabled)
    try:
        yield
    finally:
        with _lock:
            _disabled.clear()
            _disabled.update(previous)
            for site in _sites.values():
                site.install(_disabled)


def is_enabled(fix_name: str) -> bool:
    """False inside :func:`upstream_behaviour` for this fix."""
    return fix_name not in _disabled
