"""The diffusers part of the compatibility harness: what ``compatibility/diffusers.md`` is made of.

- :mod:`.tp_check` (under torchrun): TP=2 output equals TP=1 for each class with a plan, sharded both
  ways diffusers supports;
- :mod:`.compile_check`: ``compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)``
  over a denoising loop, graphs counted, outputs against CPU;
- :mod:`.pipeline_check`: tiny pipelines on the device against CPU, eager and compiled;
- :mod:`.table`: renders the table from their results;
- :mod:`.run`: ``hf-neuron compat diffusers``, which runs them all (and the compile benchmark).

The tiny models and pipelines they check come from :mod:`hf_neuron.testing`.
"""
