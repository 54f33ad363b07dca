"""The shape of every per-class fix: supply a class attribute that upstream leaves empty.

diffusers and Transformers read configuration from class attributes (diffusers: ``_tp_plan`` for
``TensorParallelConfig``, ``_repeated_blocks`` for ``compile_repeated_blocks``; Transformers:
``base_model_tp_plan`` on a configuration class for ``DistributedConfig(tp_size=...)``). For a class
upstream ships without one, hf_neuron sets ours when the class's module is imported — only while
upstream's value is empty, so a value a later release ships wins. Detection reads the class body
without importing the module (75 diffusers transformer modules would cost seconds at import).
"""

from __future__ import annotations

from typing import Any, Callable

from hf_neuron.patching import fix, is_patched, mark_closed, replace, when_imported
from hf_neuron.patching.sources import class_assigns

EMPTY = (None, [], (), {})


def supply_class_attribute(
    fix_name: str,
    module: str,
    class_name: str,
    attribute: str,
    build: Callable[[], Any],
    gap: str,
    on_installed: Callable[[Any], None] | None = None,
    *,
    library: str = "diffusers",
) -> None:
    """Register the fix ``fix_name``: ``class_name.attribute = build()`` in ``module`` while upstream's is empty.

    ``gap`` is the one-sentence description ``hf-neuron env`` shows; ``on_installed(value)`` runs after
    our value is set.
    """

    def detect() -> bool:
        return class_assigns(module, class_name, attribute) is False

    def install(loaded) -> None:
        cls = getattr(loaded, class_name, None)
        if cls is None:
            mark_closed(fix_name, "class not found in its module")
            return
        if is_patched(cls, attribute, fix_name):
            return
        if getattr(cls, attribute, None) not in EMPTY:
            mark_closed(fix_name, f"upstream sets {attribute}: ours not installed")
            return
        value = build()
        replace(fix_name, cls, attribute, value)
        if on_installed is not None:
            on_installed(value)

    def apply() -> None:
        when_imported(module, install)

    apply.__doc__ = (
        f"{gap}\n\nDetected from the class body (nothing assigned to {attribute}) and again on import: set "
        f"only while upstream's value is empty, so a value upstream ships later wins."
    )
    fix(fix_name, library, detect)(apply)
