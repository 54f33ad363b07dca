"""diffusers adapter: tensor-parallel plans and ``_repeated_blocks`` for the transformer classes
upstream ships without them, plus what sharding them needs (see :mod:`.tensor_parallel`).

``activate()`` runs when ``diffusers`` is imported (``hf_neuron.adapters``). It imports nothing
from diffusers itself: each fix waits for its model module to be imported.
"""

from __future__ import annotations


def register() -> None:
    """Declare the diffusers fixes (importing their modules imports nothing from diffusers)."""
    from hf_neuron.diffusers import repeated_blocks, tensor_parallel  # noqa: F401


def activate() -> None:
    """Declare the diffusers fixes and apply those whose gap exists (idempotent)."""
    from hf_neuron.patching import apply_fixes

    register()
    apply_fixes("diffusers")
