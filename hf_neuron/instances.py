"""Trainium instance sizes: how many chips each holds, and so how many ``neuron`` devices.

One table, with where each figure comes from, so that ``hf-neuron check`` can say which instance holds a
model at a tensor-parallel degree. The per-chip figures (physical NeuronCores and HBM per chip) are the
simulator's, which follow TorchNeuron's documentation; a ``neuron`` device is one *logical* NeuronCore
(``NEURON_LOGICAL_NC_CONFIG`` physical cores, 2 by default).
"""

from __future__ import annotations

import dataclasses

from hf_neuron.simulator.config import HBM_GIB_PER_CHIP, PHYSICAL_CORES_PER_CHIP

#: Where the instance sizes below come from.
SOURCES = {
    "torchneuron": "TorchNeuron documentation, device model: a Trn2 chip has 8 physical NeuronCores and 96 GiB HBM, "
                   "a Trn3 chip 8 and 144 GiB; trn2.48xlarge = 16 chips = 64 devices at LNC=2",
    "neuron-trn2": "AWS Neuron documentation, Amazon EC2 Trn2 architecture "
                   "(awsdocs-neuron.readthedocs-hosted.com: about-neuron/arch/neuron-hardware/trn2-arch): "
                   "trn2.3xlarge has 1 Trainium2 chip, trn2.48xlarge and trn2u.48xlarge 16",
}


@dataclasses.dataclass(frozen=True)
class InstanceSize:
    name: str
    family: str  # the device name torch.neuron.get_device_properties reports: trn2, trn2u, trn3
    chips: int
    source: str  # a key of SOURCES

    def devices(self, logical_nc_config: int = 2) -> int:
        """``neuron`` devices (logical NeuronCores) of the instance."""
        return self.chips * logical_cores_per_chip(logical_nc_config)


#: Every instance size we know the chip count of, smallest first per family. TorchNeuron's documentation
#: names no trn3 instance size: for trn3, ``hf-neuron check`` reports the chips needed instead.
INSTANCE_SIZES = (
    InstanceSize("trn2.3xlarge", "trn2", 1, "neuron-trn2"),
    InstanceSize("trn2.48xlarge", "trn2", 16, "torchneuron"),
    InstanceSize("trn2u.48xlarge", "trn2u", 16, "neuron-trn2"),
)

FAMILIES = tuple(sorted(HBM_GIB_PER_CHIP))


def logical_cores_per_chip(logical_nc_config: int = 2) -> int:
    return PHYSICAL_CORES_PER_CHIP // logical_nc_config


def sizes_of(family: str) -> list[InstanceSize]:
    return [size for size in INSTANCE_SIZES if size.family == family]


def max_devices(family: str, logical_nc_config: int = 2) -> int:
    """Devices of the family's largest known instance (16 chips when the documentation names none)."""
    sizes = sizes_of(family)
    chips = max((s.chips for s in sizes), default=16)
    return chips * logical_cores_per_chip(logical_nc_config)


def sizes_holding(family: str, devices: int, logical_nc_config: int = 2) -> list[InstanceSize]:
    """The family's instance sizes with at least ``devices`` logical NeuronCores."""
    return [s for s in sizes_of(family) if s.devices(logical_nc_config) >= devices]


__all__ = ["FAMILIES", "INSTANCE_SIZES", "InstanceSize", "SOURCES", "logical_cores_per_chip", "max_devices",
           "sizes_holding", "sizes_of"]
