"""PEFT adapter: what PEFT needs to load a saved adapter on a machine with Neuron devices, as a named fix.

``register()`` declares the fixes; ``hf_neuron.adapters`` applies them when ``peft`` is imported. Each
fix waits for the PEFT module it changes; nothing here imports PEFT.

Fixes (``hf-neuron env`` lists them and whether each is active):

- ``peft.adapter_weights_through_host`` (:mod:`.adapter_loading`): a saved adapter's weights are read on
  the host and moved to the Neuron device PEFT asks for (safetensors cannot read onto ``neuron``).

Training with PEFT (LoRA under TRL's ``use_peft``) needs nothing of its own: the TRL and Transformers
adapters' fixes apply to the wrapped model.
"""

from __future__ import annotations


def register() -> None:
    """Declare the PEFT fixes (importing their modules imports nothing from PEFT)."""
    from hf_neuron.peft import adapter_loading  # noqa: F401
