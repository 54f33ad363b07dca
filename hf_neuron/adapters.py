"""Wires each library adapter to the import of its library, only where a neuron device exists.

Each adapter package (``hf_neuron.transformers``, ``hf_neuron.trl``, ``hf_neuron.diffusers``,
``hf_neuron.peft``) exposes ``register()``, which declares its fixes; :func:`activate` registers them and
applies them with ``hf_neuron.patching.apply_fixes``.

Like a platform plugin, hf_neuron leaves a process without a neuron device exactly as released:
no import hook is installed, nothing is patched, nothing is printed. A device is there when the
simulated one is installed (``HF_NEURON_SIMULATOR``) or, with a real torch-neuronx, when
``torch.neuron.is_available()`` says so at the library's import. ``HF_NEURON_DISABLE=1`` leaves
every library untouched even then.
"""

from __future__ import annotations

import importlib
import sys

from hf_neuron.patching import adapters_disabled, apply_fixes, when_imported

ADAPTERS = {
    "transformers": "hf_neuron.transformers",
    "trl": "hf_neuron.trl",
    "diffusers": "hf_neuron.diffusers",
    "peft": "hf_neuron.peft",
}

_installed = False


def neuron_device_available() -> bool:
    """Whether this process has a neuron device (asked only once torch is fully imported)."""
    torch = sys.modules.get("torch")
    device_module = getattr(torch, "neuron", None)
    try:
        return bool(device_module is not None and device_module.is_available())
    except Exception:  # a half-initialised device runtime is no device
        return False


def _activate(library: str):
    def callback(_library_module) -> None:
        if not neuron_device_available():
            return
        from hf_neuron.versions import warn_if_unverified

        warn_if_unverified(library)
        activate(library)

    return callback


def activate(library: str) -> None:
    """Declare the fixes of ``library``'s adapter and apply those whose gap exists (idempotent)."""
    adapter = ADAPTERS[library]
    if adapter in sys.modules:
        # Already imported, or being imported: the library's import can happen inside the adapter's own
        # (``from hf_neuron.transformers import ...`` imports torch, whose device autoload gets here).
        # Then the fixes are declared once the adapter's body has finished.
        when_imported(adapter, lambda module: (module.register(), apply_fixes(library)))
        return
    importlib.import_module(adapter).register()
    apply_fixes(library)


def install() -> None:
    """Register the post-import hooks (idempotent). Called where a neuron device may exist."""
    global _installed
    if _installed or adapters_disabled():
        return
    _installed = True
    for library in ADAPTERS:
        when_imported(library, _activate(library))
