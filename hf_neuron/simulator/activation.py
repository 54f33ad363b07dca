"""Deciding whether the simulator runs, and installing it."""

from __future__ import annotations

import os
import sys
import threading

_lock = threading.RLock()
_active = False


def real_torch_neuronx_installed() -> bool:
    """True when a real torch-neuronx (not our shim) is importable."""
    for finder in sys.meta_path:
        if getattr(finder, "simulates_torch_neuronx", False):  # our shim (importing it here would be a cycle)
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec("torch_neuronx", None)
        except Exception:
            continue
        if spec is not None:
            return True
    return False


def _requested() -> str:
    return os.environ.get("HF_NEURON_SIMULATOR", "0").strip().lower()


def is_simulated() -> bool:
    return _active


def autoload() -> bool:
    """Called at ``import torch``: install when HF_NEURON_SIMULATOR asks for it. True when active."""
    mode = _requested()
    if mode in ("", "0", "false", "no", "off"):
        return False
    return install(force=mode == "force")


def install(force: bool = False) -> bool:
    """Install the simulated device in this process. Returns True when the simulator is active.

    Where a real torch-neuronx is installed, this does nothing unless ``force`` is set. Installing
    the device also wires the library adapters (``hf_neuron.adapters``): the process now has a
    neuron device.
    Call it before the first ``backward()`` of the process: autograd sizes its per-device queues at
    the first backward. ``HF_NEURON_SIMULATOR=1`` installs at ``import torch``, which is always early enough.
    """
    global _active
    with _lock:
        if _active:
            return True
        if not force and real_torch_neuronx_installed():
            return False
        from hf_neuron.simulator import device

        device.install()
        _active = True
    from hf_neuron import adapters

    adapters.install()
    return True
