"""``_repeated_blocks`` for block-structured diffusers classes that upstream leaves without one.

``ModelMixin.compile_repeated_blocks`` (regional compilation) compiles every submodule whose class
name is listed in ``_repeated_blocks``; with an empty list it raises. Each entry here is installed as
the named fix ``diffusers.repeated_blocks.<Class>`` only while upstream's list is empty.
"""

from __future__ import annotations

import logging

from hf_neuron._import_hooks import when_imported
from hf_neuron.diffusers._plan_registry import TRANSFORMERS_PACKAGE, class_assigns
from hf_neuron.fixes import _FIXES, fix

logger = logging.getLogger("hf_neuron")

# class -> (module under diffusers.models.transformers, block class names)
REPEATED_BLOCKS: dict[str, tuple[str, tuple[str, ...]]] = {}

_INSTALLED: dict[str, tuple[str, ...]] = {}


def _install(module, class_name: str, blocks: tuple[str, ...]) -> None:
    entry = _FIXES.get(f"diffusers.repeated_blocks.{class_name}")
    cls = getattr(module, class_name, None)
    if cls is None:
        if entry is not None:
            entry.active, entry.reason = False, "class not found in its module"
        return
    if getattr(cls, "_repeated_blocks", None):
        if _INSTALLED.get(class_name) is None and entry is not None:
            entry.active, entry.reason = False, "upstream sets _repeated_blocks: ours not installed"
        return
    cls._repeated_blocks = list(blocks)
    _INSTALLED[class_name] = tuple(blocks)


def _register(class_name: str, module: str, blocks: tuple[str, ...]) -> None:
    module_path = f"{TRANSFORMERS_PACKAGE}.{module}"

    def detect() -> bool:
        return class_assigns(module_path, class_name, "_repeated_blocks") is False

    def apply() -> None:
        when_imported(module_path, lambda mod: _install(mod, class_name, blocks))

    apply.__doc__ = (
        f"diffusers leaves {class_name}._repeated_blocks empty, so `compile_repeated_blocks` raises; hf_neuron "
        f"lists its block classes {list(blocks)}.\n\n"
        f"Detected from the class body (no list assigned) and again on import: installed only while the "
        f"attribute is empty, so a list upstream ships later wins."
    )
    fix(f"diffusers.repeated_blocks.{class_name}", "diffusers", detect)(apply)


for _name, (_module, _blocks) in REPEATED_BLOCKS.items():
    _register(_name, _module, _blocks)
