"""Run a callback once a module has finished importing, without importing it ourselves.

The adapters patch transformers, trl and diffusers in every process (torchrun workers included)
without the user importing hf_neuron: they are wired up at ``import torch`` and must then *wait*
for the libraries, since importing them eagerly would cost seconds to every torch user.

A callback always receives a module whose body has run to the end. Two cases reach that point:

- the module is imported after the callback is registered: a meta-path finder wraps its loader,
  and the callback runs right after the loader executed the module;
- the module is in ``sys.modules`` already but its body is still running further up this thread's
  stack (``import torch`` happened inside it, which is when the adapters get wired): the callback is
  deferred. The import system binds a submodule on its parent package right after the body ends
  (the documented ``package.submodule`` binding), so the parent module is given a subclass of its
  own module class (a documented module ``__class__`` assignment) that delivers the deferred
  callbacks at that binding and then restores the parent's class. Top-level modules, and parents
  whose class cannot be changed, get them at the next import anywhere, or from
  :func:`deliver_finished`.

Whether a body is still running is read from the interpreter stack (a frame executing the
module's top-level code), not from importlib's private bookkeeping.
"""

from __future__ import annotations

import importlib.abc
import inspect
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Callback = Callable[[ModuleType], None]

_callbacks: dict[str, list[Callback]] = {}  # every registration, run at each (re)import
_deferred: dict[str, list[Callback]] = {}  # registered while the module's body was still running
_lock = threading.RLock()


def _body_running(module: ModuleType) -> bool:
    """Whether the top-level code of ``module`` is executing on this thread's stack."""
    namespace = vars(module)
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
                return True
            frame = frame.f_back
        return False
    finally:
        del frame


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader, name: str):
        self._wrapped = wrapped
        self._name = name

    def create_module(self, spec):
        return self._wrapped.create_module(spec)

    def exec_module(self, module):
        self._wrapped.exec_module(module)
        with _lock:
            _deferred.pop(self._name, None)  # the full list below includes them
            callbacks = list(_callbacks.get(self._name, ()))
        for callback in callbacks:
            callback(module)

    def __getattr__(self, item):  # get_source, is_package, ... for tools that ask the loader
        return getattr(self._wrapped, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if _deferred:
            deliver_finished()
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


_watchers: dict[type, type] = {}  # a module class -> its subclass that watches submodule bindings


def _binding_watcher(module_class: type) -> type:
    """A subclass of ``module_class`` that delivers deferred callbacks when a submodule is bound on it."""
    watcher = _watchers.get(module_class)
    if watcher is None:

        def __setattr__(self, name, value):
            module_class.__setattr__(self, name, value)
            if isinstance(value, ModuleType) and value.__name__ in _deferred:
                deliver_finished()
                prefix = self.__name__ + "."
                if not any(deferred.startswith(prefix) for deferred in _deferred):
                    module_class.__setattr__(self, "__class__", module_class)

        namespace = {"__setattr__": __setattr__, "__module__": module_class.__module__}
        watcher = _watchers[module_class] = type(module_class.__name__, (module_class,), namespace)
    return watcher


def _watch_parent_binding(module_name: str) -> None:
    parent = sys.modules.get(module_name.rpartition(".")[0])
    if parent is None or type(parent) in _watchers.values():
        return
    if type(parent).__setattr__ is not ModuleType.__setattr__:
        return  # a module class with its own __setattr__ is left alone: the next import delivers
    try:
        parent.__class__ = _binding_watcher(type(parent))
    except TypeError:
        pass


def deliver_finished() -> None:
    """Run the deferred callbacks of every module whose import has finished since."""
    with _lock:
        ready = []
        for name in list(_deferred):
            module = sys.modules.get(name)
            if module is None:  # its import failed: nothing to deliver
                _deferred.pop(name)
            elif not _body_running(module):
                ready.append((module, _deferred.pop(name)))
    for module, callbacks in ready:
        for callback in callbacks:
            callback(module)


def when_imported(module_name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``module_name`` is fully imported (now, if it already is)."""
    with _lock:
        _callbacks.setdefault(module_name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        module = sys.modules.get(module_name)
        if module is None:
            return
        if _body_running(module):
            _deferred.setdefault(module_name, []).append(callback)
            _watch_parent_binding(module_name)
            return
    callback(module)


def is_imported(module_name: str) -> bool:
    """Whether ``module_name`` is in ``sys.modules`` with its body finished."""
    module = sys.modules.get(module_name)
    return module is not None and not _body_running(module)
