"""diffusers adapter: tensor-parallel plans and ``_repeated_blocks`` for the transformer classes
upstream ships without them, plus what sharding them needs (see :mod:`.tensor_parallel`).

``activate()`` runs when ``diffusers`` is imported (``hf_neuron.adapters``). It imports nothing
from diffusers itself: each fix waits for its model module to be imported.
"""

from __future__ import annotations

_activated = False


def activate() -> None:
    global _activated
    from hf_neuron.fixes import apply_fixes

    if not _activated:
        # Importing these registers their fixes.
        from hf_neuron.diffusers import repeated_blocks, tensor_parallel  # noqa: F401

        _activated = True
    apply_fixes("diffusers")
