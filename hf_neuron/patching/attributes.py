"""The one way hf_neuron changes an upstream object, and how a process gets upstream behaviour back.

Every change belongs to a name (a fix of the registry, or a part of the simulated device):

- :func:`wrap` makes ``owner.attr`` call ``wrapper(original, *args, **kwargs)``. Several names may
  wrap the same attribute: the installed value is the chain of their wrappers, in registration order.
- :func:`replace` sets ``owner.attr`` (or ``owner[key]`` for a mapping) to a value: properties, plan
  tables, dataclass field defaults.

The original of each attribute is recorded once, so :func:`upstream_behaviour` can put the originals
back for some or all fixes and re-install ours on exit: a test or a benchmark measures one workload
with and without a fix in one process (the in-process form of ``HF_NEURON_DISABLE=1``). A wrapper
also checks at call time whether its name is switched off, so references to a patched function that
other modules took (``from x import f``) follow the switch too.
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
        elif isinstance(owner, type):
            # A class may inherit the attribute: restoring then means deleting ours.
            self.original = vars(owner).get(attr, _MISSING)
        else:
            self.original = getattr(owner, attr)
        self.wrappers: list[tuple[str, Callable]] = []
        self.replacement: tuple[str, Any] | None = None

    def upstream_value(self) -> Any:
        """What the attribute is without any of our changes (an inherited one resolved)."""
        if self.original is _MISSING and not self.mapping:
            return _inherited(self.owner, self.attr)
        return self.original

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
        enabled = [(name, wrapper) for name, wrapper in self.wrappers if name not in disabled]
        if not enabled:
            self._set(self.original)
            return
        value = self.upstream_value()
        if value is _MISSING:
            raise RuntimeError(f"hf_neuron: cannot wrap {self.attr!r}: {self.owner!r} does not define it")
        for fix_name, wrapper in enabled:
            value = _chain(fix_name, value, wrapper)
        self._set(value)


def _inherited(owner: type, attr: str) -> Any:
    for base in owner.__mro__[1:]:
        if attr in vars(base):
            return vars(base)[attr]
    return _MISSING


def _chain(fix_name: str, inner: Callable, wrapper: Callable) -> Callable:
    if isinstance(inner, classmethod):  # e.g. from_pretrained: the wrapper gets the function and the class
        return classmethod(_chain(fix_name, inner.__func__, wrapper))

    @functools.wraps(inner)
    def patched(*args, **kwargs):
        if fix_name in _disabled:
            return inner(*args, **kwargs)
        return wrapper(inner, *args, **kwargs)

    patched.__hf_neuron_fix__ = fix_name
    return patched


_sites: dict[tuple[int, str, bool], _Site] = {}
_disabled: set[str] = set()


def _site(owner: Any, attr: str, mapping: bool) -> _Site:
    # A site holds its owner, so the owner's id cannot be reused while the site exists.
    key = (id(owner), attr, mapping)
    site = _sites.get(key)
    if site is None:
        site = _sites[key] = _Site(owner, attr, mapping)
    return site


def wrap(name: str, owner: Any, attr: str, wrapper: Callable, *, mapping: bool = False) -> None:
    """Make ``owner.attr`` (``owner[attr]`` when ``mapping``) call ``wrapper(original, *args, **kwargs)``
    for ``name``. Idempotent per name.

    ``owner`` is a class, a module or a mapping. On a class, ``attr`` may be inherited (an instance
    method): the wrapper is set on ``owner`` and calls what the bases define. A classmethod stays one:
    ``wrapper(original, cls, *args, **kwargs)``.
    """
    with _lock:
        site = _site(owner, attr, mapping)
        if any(existing == name for existing, _ in site.wrappers):
            return
        site.wrappers.append((name, wrapper))
        site.install(_disabled)


def replace(name: str, owner: Any, attr: str, value: Any, *, mapping: bool = False) -> None:
    """Set ``owner.attr`` (``owner[attr]`` when ``mapping``) to ``value`` for ``name``."""
    with _lock:
        site = _site(owner, attr, mapping)
        site.replacement = (name, value)
        site.install(_disabled)


def require_methods(owner: type, names) -> None:
    """For a detector: raise (the fix cannot be decided) unless ``owner`` has every method it will wrap."""
    missing = [name for name in names if not callable(getattr(owner, name, None))]
    if missing:
        raise RuntimeError(f"{owner.__module__}.{owner.__qualname__} has no {', '.join(missing)}")


def original(owner: Any, attr: str, *, mapping: bool = False) -> Any:
    """The upstream value of ``owner.attr`` (``owner[attr]``): the recorded original when patched."""
    with _lock:
        site = _sites.get((id(owner), attr, mapping))
        if site is not None:
            value = site.upstream_value()
            return None if value is _MISSING else value
    if mapping:
        return owner.get(attr)
    return getattr(owner, attr, None)


def is_patched(owner: Any, attr: str, name: str | None = None) -> bool:
    """Whether ``owner.attr`` carries a change (of ``name``, when given)."""
    with _lock:
        site = _sites.get((id(owner), attr, False))
        if site is None:
            return False
        names = {n for n, _ in site.wrappers} | ({site.replacement[0]} if site.replacement else set())
        return bool(names) if name is None else name in names


def patched_names() -> set[str]:
    """Names with at least one change installed."""
    with _lock:
        names = {name for site in _sites.values() for name, _ in site.wrappers}
        names |= {site.replacement[0] for site in _sites.values() if site.replacement is not None}
        return names


def patched_sites() -> list[tuple[Any, str, bool, Any, bool]]:
    """Every patched ``(owner, attr, mapping, original, inherited)``; an inherited original is None."""
    with _lock:
        return [
            (s.owner, s.attr, s.mapping, None if s.original is _MISSING else s.original, s.original is _MISSING)
            for s in _sites.values()
        ]


def _fix_names() -> set[str]:
    from hf_neuron.patching.registry import all_fixes

    return {f.name for f in all_fixes()}


@contextlib.contextmanager
def upstream_behaviour(*names: str) -> Iterator[None]:
    """Run the block with the upstream libraries for ``names`` (every registered fix when none given).

    The simulated device's own changes are not fixes: they stay, so the block still runs on ``neuron``.
    """
    with _lock:
        selected = set(names) if names else patched_names() & _fix_names()
        previous = set(_disabled)
        _disabled.update(selected)
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


def is_enabled(name: str) -> bool:
    """False inside :func:`upstream_behaviour` for ``name``."""
    return name not in _disabled
