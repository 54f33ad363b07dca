"""Entry point torch calls at ``import torch`` (group ``torch.backends``), in every process.

Like vLLM's plugins and TorchNeuron's own ``_autoload``: activation must not depend on the user
remembering an import, and torchrun workers must get the same set-up as the launcher.
It does two cheap things:
- installs the simulated Neuron device when ``HF_NEURON_SIMULATOR=1`` (never over a real
  torch-neuronx unless forced, see ``hf_neuron.simulator.activation``);
- registers post-import hooks so the library adapters apply their fixes when (and only when) the
  user imports transformers, trl or diffusers.
"""


def autoload() -> None:
    from hf_neuron.simulator import activation

    activation.autoload()

    from hf_neuron import adapters

    adapters.install()
