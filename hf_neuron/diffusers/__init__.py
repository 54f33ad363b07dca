"""diffusers adapter: tensor-parallel plans and ``_repeated_blocks`` for the transformer classes
upstream ships without them, plus what sharding them needs (see :mod:`.tensor_parallel`), and the
static-shape forms of the two forwards that break a block's graph on data (:mod:`.expert_dispatch`,
:mod:`.masked_attention`).

``register()`` declares the fixes; ``hf_neuron.adapters`` applies them when ``diffusers`` is
imported. Nothing here imports diffusers itself: each fix waits for its model module to be imported.
"""

from __future__ import annotations


def register() -> None:
    """Declare the diffusers fixes (importing their modules imports nothing from diffusers)."""
    from hf_neuron.diffusers import expert_dispatch, masked_attention, repeated_blocks, tensor_parallel  # noqa: F401
