"""Training with the Transformers ``Trainer`` (and TRL's trainers built on it) on Neuron.

Every fix here asks :func:`hf_neuron.devices.trains_on_neuron` whether a trainer trains on Neuron, and
:func:`hf_neuron.patching.require_methods` for the ``Trainer`` methods it wraps.

- :mod:`.batches`: every batch has the full batch size (one graph set).
- :mod:`.evaluation`: evaluations run the compiled model.
- :mod:`.checkpointing`: compiled activation checkpointing.
- :mod:`.resume`: checkpoints of models sharded at load time can be resumed.
"""
