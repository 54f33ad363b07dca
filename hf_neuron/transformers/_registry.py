"""Declaring a Transformers fix that waits for the submodule it patches.

``activate()`` runs right after ``import transformers``; importing ``transformers.generation.utils``
or ``transformers.modeling_utils`` there would cost every Transformers user (tokenizers, configs)
seconds. So each fix names the submodule it patches: its detection and patch run when (and only
when) that submodule is imported, through the same post-import hooks as the adapters.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable

from hf_neuron import fixes
from hf_neuron._import_hooks import when_imported

LIBRARY = "transformers"

_waits_for: dict[str, str] = {}  # fix name -> module whose import it waits for
_imported: set[str] = set()
_hooked: set[str] = set()


def transformers_fix(name: str, module: str, detect: Callable[[], bool]):
    """Like :func:`hf_neuron.fixes.fix`, for a patch of the Transformers submodule ``module``."""

    def detect_once_imported() -> bool:
        if module not in _imported:
            return fixes.PENDING  # detected when the module is imported (see apply_pending)
        import torch

        # The import may happen inside the caller's `with torch.device("meta"):` (model init).
        with torch.device("cpu"):
            return detect()

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        fixes.fix(name, LIBRARY, detect_once_imported)(apply)
        _waits_for[name] = module
        return apply

    return register


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _InitializationWatcher(importlib.abc.MetaPathFinder):
    """Notices, at the next import anywhere, that a module seen half-initialized has finished.

    When ``import torch`` (hence our activation) happens inside the import of a Transformers
    module we patch (``import transformers.generation.utils`` as a script's first line), that
    module is in ``sys.modules`` but not defined yet and its post-import hook has already passed.
    """

    def find_spec(self, fullname, path=None, target=None):
        # Never removes itself: importlib is iterating over sys.meta_path right now, and removing
        # an entry would make it skip the next finder (the post-import hooks).
        if not _half_initialized:
            return None
        finished = [name for name in _half_initialized if not _initializing(sys.modules.get(name))]
        if finished:
            _half_initialized.difference_update(finished)
            _imported.update(finished)
            apply_pending()
        return None


_half_initialized: set[str] = set()
_watcher = _InitializationWatcher()
_registering = False


def _module_imported(module) -> None:
    # Called by the post-import hook once the module has executed (importlib still flags it as
    # initializing then), or at once by when_imported() when the module is already in sys.modules,
    # where the flag means that its code is still running further up this thread's stack.
    if _registering and _initializing(module):
        _half_initialized.add(module.__name__)
        if _watcher not in sys.meta_path:
            sys.meta_path.insert(0, _watcher)
        return
    _imported.add(module.__name__)
    apply_pending()


def apply_pending() -> None:
    """Apply every fix whose module is imported; hook the import of the others."""
    global _registering
    for module in sorted(set(_waits_for.values()) - _hooked):
        _hooked.add(module)
        _registering = True
        try:
            when_imported(module, _module_imported)
        finally:
            _registering = False
    fixes.apply_fixes(LIBRARY)
    if fixes.adapters_disabled():
        return
    for name, module in _waits_for.items():
        if module not in _imported:
            fixes.mark_waiting(name, f"waits for `import {module}`")
