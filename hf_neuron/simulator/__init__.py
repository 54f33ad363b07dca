"""A simulated Neuron device: real tensors on a real ``neuron`` device type, backed by host memory
and CPU kernels, with TorchNeuron's documented constraints enforced.

Activate with ``HF_NEURON_SIMULATOR=1`` (every process, at ``import torch``) or
:func:`install` (this process). It never activates over a real torch-neuronx unless forced
(``HF_NEURON_SIMULATOR=force`` or ``install(force=True)``).
"""

from hf_neuron.simulator.activation import install, is_simulated, real_torch_neuronx_installed

__all__ = ["install", "is_simulated", "real_torch_neuronx_installed"]
