"""TRL adapter: what TRL's trainers need to train well on Neuron, as named fixes.

``register()`` declares the fixes; ``hf_neuron.adapters`` applies them when ``trl`` is imported. TRL
loads its trainers lazily, so each fix waits for the TRL module it changes to be imported; nothing
here imports a trainer.

Fixes (``hf-neuron env`` lists them and whether each is active):

- ``trl.pad_to_multiple_of_auto`` (:mod:`.padding`): batches padded to a multiple of 128 on Neuron
  for every trainer that pads, on TRL versions older than 1.16 too.
- ``trl.pad_packed_to_max_length`` (:mod:`.padding`): packed SFT batches padded to ``max_length``
  on Neuron, so the whole run has one batch shape.
- ``trl.neuron_device_map`` (:mod:`.model_loading`): models given by name load straight onto the
  process's Neuron device, or sharded by ``distributed_config``, never on the host first.
- ``trl.static_shapes_on_neuron`` / ``trl.neuron_compile_hint`` (:mod:`.training`): Dynamo's
  automatic dynamic shapes off when compiling on Neuron; a hint when ``torch_compile`` is off.
- ``trl.atomic_checkpoints`` (:mod:`.checkpoints`): ``checkpoint-N`` appears whole or not at all.
- ``trl.compiled_generation_on_neuron`` (:mod:`.training`): GRPO, RLOO and distillation generate
  compiled on Neuron (TRL turns compilation off for their in-loop generation).

The Trainer-level fixes every TRL trainer also gets (compiled activation checkpointing, the full last
batch, compiled evaluation, resumable sharded checkpoints) live in the Transformers adapter.

Explicit user values always win over these defaults.
"""

from __future__ import annotations


def register() -> None:
    """Declare the TRL fixes (importing their modules imports nothing from TRL)."""
    from hf_neuron.trl import checkpoints, model_loading, padding, training  # noqa: F401
