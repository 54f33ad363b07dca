"""Run a callback right after a module is imported, without importing it ourselves.

The adapters must patch transformers/trl/diffusers in every process (torchrun workers included)
without the user importing hf_neuron. ``hf_neuron._autoload`` runs at ``import torch``; from there
we can only *wait* for the libraries: importing them eagerly would cost seconds for every torch user.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Callable

_callbacks: dict[str, list[Callable[[object], None]]] = {}
_lock = threading.RLock()


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader, name: str):
        self._wrapped = wrapped
        self._name = name

    def create_module(self, spec):
        return self._wrapped.create_module(spec)

    def exec_module(self, module):
        self._wrapped.exec_module(module)
        _run_callbacks(self._name, module)

    def __getattr__(self, item):  # get_source, is_package, ... for tools that ask the loader
        return getattr(self._wrapped, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PostImportLoader(spec.loader, fullname)
                return spec
        return None


_finder = _PostImportFinder()


def _run_callbacks(name: str, module) -> None:
    with _lock:
        callbacks = list(_callbacks.get(name, ()))
    for cb in callbacks:
        cb(module)


def when_imported(module_name: str, callback: Callable[[object], None]) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported (now, if it already is)."""
    with _lock:
        _callbacks.setdefault(module_name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, "__spec__", None) is not None:
        callback(module)
