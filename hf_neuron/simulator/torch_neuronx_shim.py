"""``import torch_neuronx`` while simulated, so upstream's own Neuron branches run.

transformers' ``is_torch_neuron_available`` and accelerate's MULTI_NEURON detection look for the
``torch_neuronx`` module. The finder sits at the *end* of ``sys.meta_path``: a real installation is
always found first, so the shim can never shadow it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

SIMULATED_VERSION = "2.13.3+hf_neuron.simulated"


class SimulatedTorchNeuronx(types.ModuleType):
    def __repr__(self) -> str:
        return "<module 'torch_neuronx' (hf_neuron simulated Neuron device, not the real torch-neuronx)>"


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return SimulatedTorchNeuronx(spec.name)

    def exec_module(self, module):
        module.__version__ = SIMULATED_VERSION
        module.SIMULATED = True
        module.__doc__ = (
            "Simulated torch_neuronx provided by hf_neuron (HF_NEURON_SIMULATOR=1): a `neuron` device backed by "
            "host memory and CPU kernels. Not the real torch-neuronx."
        )

        def _autoload():
            """The real package's device-autoload hook. The shim is only importable once the simulator is
            installed (installing it adds the finder), so there is nothing left to do."""

        module._autoload = _autoload


class ShimFinder(importlib.abc.MetaPathFinder):
    #: How :func:`hf_neuron.simulator.activation.real_torch_neuronx_installed` tells this finder from a real one.
    simulates_torch_neuronx = True

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch_neuronx":
            return None
        return importlib.machinery.ModuleSpec("torch_neuronx", _ShimLoader(), origin="hf_neuron-simulator")


def install_finder() -> None:
    if not any(isinstance(f, ShimFinder) for f in sys.meta_path):
        sys.meta_path.append(ShimFinder())
