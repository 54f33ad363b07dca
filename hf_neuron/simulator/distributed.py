"""Process-group backend ``"neuron"`` for the simulated device.

``dist.init_process_group(backend="neuron")`` under ``torchrun --nproc_per_node=N`` gives a
process group whose backend for the ``neuron`` device type is a C++ ``c10d::Backend``
(``csrc_c10d/backend.cpp``) that runs every collective on gloo over zero-copy CPU views of the
neuron tensors. Being a real c10d backend registered for the device type (not a Python
``ProcessGroup``), it is found by everything that looks a backend up by device: DTensor and
functional collectives (by ``group_name``), tensor parallel, FSDP2 and DDP.

TorchNeuron's own limits are enforced, so code that runs here also runs on Trainium:

- one Neuron device per process;
- the Neuron runtime must not be initialised before ``init_process_group``: allocating a neuron
  tensor first is an error here, as it is there;
- barrier only on a group spanning the whole world;
- all_to_all with even splits only;
- no communicator splitting (``supports_splitting`` is false, so DeviceMesh builds its sub-groups
  with ``new_group``).

ReduceOp.AVG and PREMUL_SUM, which gloo lacks but FSDP2 uses, are computed as SUM plus a division
or a pre-multiplication.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

BACKEND = "neuron"
_CSRC = Path(__file__).parent / "csrc_c10d"
_SOURCES = ["backend.cpp"]

_lock = threading.Lock()
_registered = False
_module = None
_default_group_created = False


def register() -> None:
    """Register the ``"neuron"`` process-group backend (idempotent and cheap: nothing is built here).

    Does nothing when another ``"neuron"`` backend (a real torch-neuronx) is already registered.
    """
    global _registered
    with _lock:
        if _registered:
            return
        import torch.distributed as dist

        if not dist.is_available():
            return
        plugin = dist.Backend._plugins.get(BACKEND.upper())
        if plugin is not None and plugin.creator_fn is not _create_backend:
            return
        dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=[BACKEND])
        _registered = True


def load_extension():
    """Return the compiled backend module, compiling it on first use (a few minutes on 2 cores)."""
    global _module
    if _module is not None:
        return _module
    import torch.distributed  # noqa: F401  (binds c10d::Backend, the base class of ours)

    from hf_neuron.simulator._extension import build_and_load

    note = None
    if os.environ.get("LOCAL_RANK", "0") == "0":
        note = "building the simulated Neuron process-group backend (once per torch version; a few minutes)..."
    _module = build_and_load("hf_neuron_c10d_C", _CSRC, _SOURCES, "c10d", note)
    return _module


def neuron_allocations() -> int:
    """Neuron tensors allocated so far in this process (the simulator's stand-in for 'runtime initialised')."""
    import torch

    from hf_neuron.simulator import _extension

    C = _extension.load()
    return sum(C.memory_stats(i)["allocation.all.allocated"] for i in range(torch.neuron.device_count()))


def _check_runtime_not_initialised() -> None:
    allocated = neuron_allocations()
    if allocated:
        raise RuntimeError(
            f"init_process_group(backend='neuron') was called after the Neuron runtime was initialised "
            f"({allocated} neuron tensor allocations in this process). On Trainium the runtime must not be "
            "initialised before init_process_group: it assigns each process its Neuron core. Call "
            "init_process_group before creating any tensor or moving any model to the neuron device."
        )


def _create_backend(opts, backend_options=None):
    """c10d's creator for ``backend="neuron"`` (extended API: ``opts`` is a DistributedBackendOptions)."""
    global _default_group_created
    import torch.distributed as dist

    is_default_group = len(opts.global_ranks_in_group) == 0
    if is_default_group and not _default_group_created:
        _check_runtime_not_initialised()
    C = load_extension()
    gloo = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    gloo.options.global_ranks_in_group = list(opts.global_ranks_in_group)
    gloo.options.group_name = opts.group_id
    world_size = opts.group_size if is_default_group else dist.get_world_size()
    backend = C.NeuronBackend(gloo, world_size)
    if is_default_group:
        _default_group_created = True
    return backend
