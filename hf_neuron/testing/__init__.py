"""Helpers for tests, benchmarks and the compatibility harness — never imported by the adapters.

- :mod:`.tiny_models` (with :mod:`.tiny`): tiny random checkpoints of any causal-LM ``model_type``
  and a small local tokenizer, built without network.
- :mod:`.tiny_diffusers`, :mod:`.tiny_pipelines`: tiny diffusers transformers (with their inputs)
  and tiny end-to-end pipelines.
- :mod:`.generation_workload`: the multi-prompt generation workload the graph-count promises use.
- :mod:`.graphs`: ``count_graphs()``, the one graph counter (the simulator's graph log, or Dynamo's
  counters on real Trainium).
- :mod:`.distributed_selftest`: collectives of the ``neuron`` process-group backend under torchrun.
"""
