"""Wires each library adapter to the import of its library.

Each adapter package (``hf_neuron.transformers``, ``hf_neuron.trl``, ``hf_neuron.diffusers``)
exposes ``activate()``, which registers its fixes and applies them with
``hf_neuron.fixes.apply_fixes``. ``HF_NEURON_DISABLE=1`` leaves every library untouched.
"""

from __future__ import annotations

import importlib

from hf_neuron._import_hooks import when_imported
from hf_neuron.fixes import adapters_disabled

ADAPTERS = {
    "transformers": "hf_neuron.transformers",
    "trl": "hf_neuron.trl",
    "diffusers": "hf_neuron.diffusers",
}

_installed = False


def _activate(library: str, adapter_module: str):
    def callback(_library_module) -> None:
        from hf_neuron.versions import warn_if_unverified

        warn_if_unverified(library)
        adapter = importlib.import_module(adapter_module)
        activate = getattr(adapter, "activate", None)
        if activate is not None:
            activate()

    return callback


def install() -> None:
    """Register the post-import hooks (idempotent)."""
    global _installed
    if _installed or adapters_disabled():
        return
    _installed = True
    for library, adapter in ADAPTERS.items():
        when_imported(library, _activate(library, adapter))
