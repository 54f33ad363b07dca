"""Entry point torch calls at ``import torch`` (group ``torch.backends``), in every process.

Like vLLM's platform plugins and TorchNeuron's own ``_autoload``: activation must not depend on the
user remembering an import, and torchrun workers must get the same set-up as the launcher. It costs
nothing and changes nothing where no neuron device can exist:
- installs the simulated Neuron device when ``HF_NEURON_SIMULATOR=1`` (never over a real
  torch-neuronx unless forced, see ``hf_neuron.simulator.activation``), which wires the adapters;
- with a real torch-neuronx installed, wires the adapters to the import of transformers, trl and
  diffusers (each checks for a device when its library is imported);
- otherwise returns without touching anything.
"""


def autoload() -> None:
    from hf_neuron.simulator import activation

    if activation.autoload():
        return  # the simulated device is installed, and it wired the adapters
    if activation.real_torch_neuronx_installed():
        from hf_neuron import adapters

        adapters.install()
