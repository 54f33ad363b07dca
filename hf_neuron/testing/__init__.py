"""Helpers for tests, benchmarks and the compatibility harness: nothing else imports them (a test checks it).

- :mod:`.tiny_diffusers`, :mod:`.tiny_pipelines`: tiny diffusers transformers (with their inputs)
  and tiny end-to-end pipelines.
- :mod:`.generation_workload`: the multi-prompt generation workload the graph-count promises use.
- :mod:`.training_graphs`, :mod:`.user_scripts`: graph counts of training runs; the published recipes
  run as users run them.
- :mod:`.distributed_selftest`: collectives of the ``neuron`` process-group backend under torchrun.

The product's own helpers live beside it: :mod:`hf_neuron.graphs` (``count_graphs()``, the one graph
counter) and :mod:`hf_neuron.tiny_models` (tiny random checkpoints and a local tokenizer, which
``hf-neuron tiny-model``, ``hf-neuron demo`` and ``hf-neuron plan`` use).
"""
