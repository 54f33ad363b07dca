"""Subcommands of the `hf-neuron` CLI, one module each."""
