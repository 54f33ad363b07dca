"""``torch.neuron``: the device module, with the surface TorchNeuron documents and HF libraries call."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from hf_neuron.simulator import _extension

_host = None  # set by hf_neuron.simulator.device.install


def _C():
    return _extension.load()


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"cannot interpret {device!r} as a neuron device")


# ---- device ----
def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C().device_count()


def current_device() -> int:
    return _C().current_device()


def set_device(device) -> None:
    _C().set_device(_index(device))


def is_initialized() -> bool:
    return True


def init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0:
            set_device(self.prev_idx)
        return False


def get_device_name(device=None) -> str:
    return f"neuron:{_index(device)}"


@dataclasses.dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    total_memory: int

    def __repr__(self) -> str:
        return f"NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1 << 20)}MB, simulated=True)"


def get_device_properties(device=None) -> NeuronDeviceProperties:
    idx = _index(device)
    if not 0 <= idx < device_count():
        raise RuntimeError(f"Invalid device index neuron:{idx}: this host has {device_count()} neuron device(s)")
    return NeuronDeviceProperties(name=_host.instance_family, total_memory=_C().total_memory())


def synchronize(device=None) -> None:
    """Work on the simulated device completes eagerly; nothing to wait for."""


def Stream(device=None, priority: int = 0, **kwargs) -> torch.Stream:
    """A stream on a neuron device (work completes eagerly on the simulated device)."""
    return torch.Stream(device=torch.device("neuron", _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    return torch.Event(torch.device("neuron", current_device()), enable_timing=enable_timing, blocking=blocking,
                       interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.Stream(device=torch.device("neuron", _index(device)))


def default_stream(device=None) -> torch.Stream:
    return current_stream(device)


@contextlib.contextmanager
def stream(s):
    yield s


# ---- RNG ----
def default_generator(device=None) -> torch.Generator:
    return _C().default_generator(_index(device))


def manual_seed(seed: int) -> None:
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        default_generator(i).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    s = default_generator(0).seed()
    for i in range(1, device_count()):
        default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return default_generator(_index(device) if device != "neuron" else None).get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    default_generator(_index(device) if device != "neuron" else None).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [default_generator(i).get_state() for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        default_generator(i).set_state(state)


# ---- AMP ----
def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float32, torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("neuron")


# ---- memory ----
def memory_stats(device=None) -> dict[str, int]:
    stats = dict(_C().memory_stats(_index(device)))
    stats["reserved_bytes.all.current"] = stats["allocated_bytes.all.current"]
    stats["reserved_bytes.all.peak"] = stats["allocated_bytes.all.peak"]
    return stats


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    _C().reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device=None) -> tuple[int, int]:
    total = _C().total_memory()
    return total - memory_allocated(device), total


def empty_cache() -> None:
    """The simulated allocator frees memory immediately; there is no cache to empty."""


def memory_summary(device=None, abbreviated: bool = False) -> str:
    s = memory_stats(device)
    mib = 1 << 20
    return (
        f"neuron:{_index(device)} (simulated {_host.instance_family}): "
        f"allocated {s['allocated_bytes.all.current'] / mib:.1f} MiB, "
        f"peak {s['allocated_bytes.all.peak'] / mib:.1f} MiB, "
        f"total {_C().total_memory() / mib:.0f} MiB, "
        f"{s['allocation.all.current']} live blocks"
    )


SIMULATED = True
