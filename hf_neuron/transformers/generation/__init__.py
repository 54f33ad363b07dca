"""``generate`` on Neuron: one graph per prefill bucket plus one decode graph per (batch size, ``max_cache_len``).

- :mod:`.steps`: what a generation step looks like to the model (the cache keyword, step inputs and
  masks as ``generate`` builds them); the base every other module here builds on.
- :mod:`.defaults`: static cache, ``max_cache_len``, prefill buckets and a "neuron" compile config filled
  in where the user set none; a prompt that does not fit the cache refused before it compiles.
- :mod:`.chunked_prefill`, :mod:`.prefill_schedule`: every prompt that fits is prefilled in chunks of
  the prefill buckets (left padding, an overlapping last chunk, or a decode-graph tail).
- :mod:`.batch_buckets`: batches padded to the next of a few sizes (opt-in).
- :mod:`.sliding_window_cache`, :mod:`.recurrent_cache`, :mod:`.cache_allocation`, :mod:`.cache_dtype`:
  static caches that compile once (sliding windows, recurrent state, every layer allocated ahead, mixed
  precision).
- :mod:`.capture`: whether a model's forward traces into one graph per step, decided by tracing it.
- :mod:`.compiled_call`, :mod:`.recompile_limit`: every model type compiled, past Dynamo's limit of 8.
- :mod:`.tokenization`, :mod:`.warmup`: prompts padded up front; graphs compiled before traffic.

Fixes for a single architecture live in :mod:`hf_neuron.transformers.models`.
"""
