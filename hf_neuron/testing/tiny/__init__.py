"""Tiny-model factory internals: ``tokenizer`` (local BPE + chat template), ``configs`` (generic shrink and
override table), ``factory`` (models, checkpoints), ``audit`` (every causal-LM architecture).
Import the public API from :mod:`hf_neuron.testing.tiny_models`."""
