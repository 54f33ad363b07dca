"""Declaring a Transformers fix that waits for the submodule it patches.

``activate()`` runs right after ``import transformers``; importing ``transformers.generation.utils``
or ``transformers.modeling_utils`` there would cost every Transformers user (tokenizers, configs)
seconds. So each fix names the submodule it patches: its detection and patch run when (and only
when) that submodule is imported, through the same post-import hooks as the adapters.
"""

from __future__ import annotations

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
            return False  # re-detected when the module is imported (see apply_pending)
        import torch

        # The import may happen inside the caller's `with torch.device("meta"):` (model init).
        with torch.device("cpu"):
            return detect()

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        fixes.fix(name, LIBRARY, detect_once_imported)(apply)
        _waits_for[name] = module
        return apply

    return register


def _module_imported(module) -> None:
    _imported.add(module.__name__)
    apply_pending()


def apply_pending() -> None:
    """Apply every fix whose module is imported; hook the import of the others."""
    for module in sorted(set(_waits_for.values()) - _hooked):
        _hooked.add(module)
        when_imported(module, _module_imported)
    fixes.apply_fixes(LIBRARY)
    if fixes.adapters_disabled():
        return
    for name, module in _waits_for.items():
        fix = fixes.get_fix(name)
        if not fix.active and module not in _imported:
            fix.reason = f"waits for `import {module}`"
