"""Compatibility harness: which of the top-100 text-generation architectures run on Neuron, and
which diffusers transformer classes and pipelines (:mod:`hf_neuron.compat.diffusers`).

``hf-neuron compat`` (``hf_neuron.commands.compat``) drives :mod:`hf_neuron.compat.runner`, which runs the
levels of :mod:`hf_neuron.compat.levels` in worker processes (:mod:`hf_neuron.compat.worker`, and
:mod:`hf_neuron.compat.tp_worker` under torchrun for L5), records :mod:`hf_neuron.compat.results` and
regenerates ``compatibility/README.md`` (in a source checkout, :mod:`hf_neuron.compat.paths`) with
:mod:`hf_neuron.compat.report`.
``hf-neuron compat diffusers`` runs :mod:`hf_neuron.compat.diffusers.run` instead.
"""
