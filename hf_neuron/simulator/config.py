"""What the simulated host looks like: how many ``neuron`` devices, how much memory each.

One ``neuron:i`` device is one *logical* NeuronCore, as in TorchNeuron. A Trn2 chip has 8 physical
cores and 96 GiB of HBM; ``NEURON_LOGICAL_NC_CONFIG=2`` (the default) pairs them into 4 logical
cores of 24 GiB. We default to one chip, grown to at least ``LOCAL_WORLD_SIZE`` devices so that
every torchrun process has its own device.
"""

from __future__ import annotations

import dataclasses
import math
import os

PHYSICAL_CORES_PER_CHIP = 8
HBM_GIB_PER_CHIP = {"trn2": 96, "trn2u": 96, "trn3": 144}
MAX_DEVICES = 127


class SimulatorConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class SimulatedHost:
    instance_family: str
    logical_nc_config: int
    chips: int
    device_count: int
    bytes_per_device: int


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SimulatorConfigError(f"{name}={raw!r} is not an integer") from None


def _visible_cores(raw: str) -> int:
    """Count of devices named by NEURON_RT_VISIBLE_CORES: an index ("3") or an inclusive range ("1-3")."""
    raw = raw.strip()
    try:
        if "-" in raw:
            lo, hi = (int(x) for x in raw.split("-", 1))
            if hi < lo:
                raise ValueError
            return hi - lo + 1
        int(raw)
        return 1
    except ValueError:
        raise SimulatorConfigError(
            f"NEURON_RT_VISIBLE_CORES={raw!r}: expected an index such as '3' or an inclusive range such as '1-3'"
        ) from None


def host_from_env() -> SimulatedHost:
    family = os.environ.get("HF_NEURON_SIM_INSTANCE", "trn2").strip().lower()
    if family not in HBM_GIB_PER_CHIP:
        raise SimulatorConfigError(
            f"HF_NEURON_SIM_INSTANCE={family!r}: expected one of {sorted(HBM_GIB_PER_CHIP)}"
        )
    lnc = _int_env("NEURON_LOGICAL_NC_CONFIG", 2)
    if lnc not in (1, 2):
        raise SimulatorConfigError(f"NEURON_LOGICAL_NC_CONFIG={lnc}: TorchNeuron supports 1 or 2")
    per_chip = PHYSICAL_CORES_PER_CHIP // lnc
    chips = _int_env("HF_NEURON_SIM_CHIPS", 1)
    local_world = _int_env("LOCAL_WORLD_SIZE", 1)
    chips = max(chips, math.ceil(local_world / per_chip))
    count = chips * per_chip
    explicit = os.environ.get("HF_NEURON_SIM_DEVICES")
    if explicit:
        count = _int_env("HF_NEURON_SIM_DEVICES", count)
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if visible:
        count = min(count, _visible_cores(visible)) if not explicit else count
    if not 0 <= count <= MAX_DEVICES:
        raise SimulatorConfigError(f"{count} neuron devices requested; TorchNeuron supports at most {MAX_DEVICES}")
    bytes_per_device = (HBM_GIB_PER_CHIP[family] << 30) // per_chip
    return SimulatedHost(family, lnc, chips, count, bytes_per_device)


def strict_dtypes_from_env() -> bool:
    return os.environ.get("HF_NEURON_SIM_STRICT_DTYPES", "0").strip().lower() in ("1", "true", "yes")
