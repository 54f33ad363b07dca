"""``from_pretrained(device_map=...)`` on Neuron devices, as it works on CUDA.

- ``device_map="neuron"`` (or ``torch.device("neuron")``, or a ``with torch.device("neuron"):``
  block) means ``neuron:LOCAL_RANK`` - the device of this process under torchrun - else this
  thread's current neuron device, resolved in the caller's thread (upstream leaves it unindexed, so
  it follows whatever device is current in the loading worker threads).
- ``"neuron:1"`` and dict maps with neuron entries keep their meaning; unindexed ``"neuron"`` entries
  are resolved as above.
- ``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"`` see the Neuron devices' memory
  (``torch.neuron`` figures), so weights go to neuron devices and spill to CPU only when they do not
  fit - upstream they see no accelerator and put the whole model on CPU.
- A neuron device map that resolves past the visible devices (``LOCAL_RANK`` beyond them) raises
  an error naming the settings to check. Without any neuron device the adapter is not active at
  all, and Transformers' own error for an unknown device name is what the user sees.
"""

from __future__ import annotations

import os

import torch

from hf_neuron.devices import is_neuron
from hf_neuron.patching import fix, wrap

DEVICE_MAP_FIX = "device-map-neuron"
MAX_MEMORY_FIX = "device-map-auto-neuron-memory"

def neuron_device_count() -> int:
    module = getattr(torch, "neuron", None)
    if module is None:
        return 0
    try:
        return int(module.device_count()) if module.is_available() else 0
    except Exception:
        return 0


def default_neuron_index() -> int:
    """``LOCAL_RANK`` under torchrun, else the calling thread's current neuron device."""
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        return int(local_rank)
    return int(torch.neuron.current_device())



def _resolve(value, device_map):
    """An unindexed neuron device becomes ``torch.device("neuron", index)``; anything else unchanged."""
    if not is_neuron(value):
        return value
    count = neuron_device_count()
    device = torch.device(value) if isinstance(value, str) else value
    if device.index is None:
        index = default_neuron_index()
        if index >= count:
            raise ValueError(
                f"device_map={device_map!r} resolves to neuron:{index} (LOCAL_RANK / current device), but "
                f"only {count} neuron devices are visible; check NEURON_RT_VISIBLE_CORES and --nproc_per_node."
            )
        device = torch.device("neuron", index)
    return device


def _check_and_set_neuron_device_map(original, device_map, *args, **kwargs):
    if isinstance(device_map, dict):
        device_map = {name: _resolve(value, device_map) for name, value in device_map.items()}
    else:
        device_map = _resolve(device_map, device_map)
    result = original(device_map, *args, **kwargs)
    if isinstance(result, dict):  # e.g. a `with torch.device("neuron"):` block upstream turned into a map
        result = {name: _resolve(value, result) for name, value in result.items()}
    return result


def _neuron_device_map_unresolved() -> bool:
    from transformers.integrations.accelerate import check_and_set_device_map

    result = check_and_set_device_map("neuron")
    return not isinstance(result, dict) or torch.device(result[""]).index is None


@fix(DEVICE_MAP_FIX, "transformers", _neuron_device_map_unresolved, waits_for="transformers.modeling_utils")
def patch_neuron_device_map() -> None:
    """``device_map="neuron"`` is not pinned to this process's device.

    Gap: ``check_and_set_device_map`` pins ``"cuda"`` to ``cuda:LOCAL_RANK`` but turns ``"neuron"``
    into an unindexed ``torch.device("neuron")``, which follows the device current in the async
    loading threads. Detected by resolving ``"neuron"`` with the upstream function. Patch: unindexed
    neuron entries (string, device, dict value, device context) become ``neuron:LOCAL_RANK`` (else
    the caller's current device).
    """
    import transformers.integrations.accelerate as hf_accelerate
    import transformers.modeling_utils as modeling_utils

    for module in (hf_accelerate, modeling_utils):
        if hasattr(module, "check_and_set_device_map"):
            wrap(DEVICE_MAP_FIX, module, "check_and_set_device_map", _check_and_set_neuron_device_map)


# ----------------------------------------------------------------------------- "auto" memory


def neuron_free_memory(index: int) -> int:
    """Bytes free on ``neuron:index``, from TorchNeuron's memory figures."""
    module = torch.neuron
    if hasattr(module, "mem_get_info"):
        return int(module.mem_get_info(index)[0])
    total = module.get_device_properties(index).total_memory
    used = module.memory_reserved(index) if hasattr(module, "memory_reserved") else module.memory_allocated(index)
    return max(int(total) - int(used), 0)


def _device_key(key):
    """``0``, ``"neuron:0"`` or ``torch.device("neuron", 0)`` -> ``0``; other keys unchanged."""
    if isinstance(key, torch.device) and key.type == "neuron":
        return key.index or 0
    if isinstance(key, str) and key.split(":")[0] == "neuron":
        return torch.device(key).index or 0
    return key


def _max_memory_with_neuron(original, max_memory=None):
    count = neuron_device_count()
    if count == 0:
        return original(max_memory)
    import psutil
    from accelerate.utils import convert_file_size_to_int

    if max_memory is None:
        memory = {index: neuron_free_memory(index) for index in range(count)}
        memory["cpu"] = psutil.virtual_memory().available
        return memory
    memory = {}
    for key, value in list(max_memory.items()):
        if isinstance(value, str):
            # Converted in the caller's dict too, as accelerate does (Transformers compares against it).
            value = max_memory[key] = convert_file_size_to_int(value)
        key = _device_key(key)
        if isinstance(key, int) and not 0 <= key < count:
            raise ValueError(f"max_memory names neuron device {key}, but the neuron devices are 0..{count - 1}.")
        if not isinstance(key, int) and key not in ("cpu", "disk"):
            raise ValueError(f"max_memory key {key!r} is not a neuron device index, 'cpu' or 'disk'.")
        memory[key] = value
    devices = sorted(k for k in memory if isinstance(k, int)) + [k for k in ("cpu", "disk") if k in memory]
    return {k: memory[k] for k in devices}


#: Where accelerate's ``get_max_memory`` lives, and the helper through which accelerate 1.16 and later
#: find the process's accelerator (``torch.accelerator``), whatever its name.
ACCELERATE_MODELING = "accelerate.utils.modeling"
ACCELERATOR_LOOKUP = "get_torch_accelerator_backend"


def _auto_map_ignores_neuron() -> bool:
    """Whether accelerate's ``get_max_memory`` leaves the neuron devices out.

    Not by calling it without ``max_memory``: accelerate 1.16 and later then create a tensor on every
    device it lists, and a detector that runs at import would initialise the Neuron runtime on every
    core before the user's ``init_process_group`` (which Neuron forbids) and claim cores that belong
    to other processes. Instead: the function finds its devices through accelerate's accelerator
    lookup, and that lookup names this process's accelerator ``neuron``.
    """
    if neuron_device_count() == 0:
        # Nothing to observe without a device; the patch falls through to upstream then.
        return True
    from hf_neuron.patching.sources import function_mentions

    uses_lookup = function_mentions(ACCELERATE_MODELING, "get_max_memory", ACCELERATOR_LOOKUP)
    if uses_lookup is None:
        raise RuntimeError(f"{ACCELERATE_MODELING}.get_max_memory not found")
    if not uses_lookup:
        return True  # it lists CUDA, XPU, NPU... by name, never Neuron
    import accelerate.utils

    device_type, _ = getattr(accelerate.utils, ACCELERATOR_LOOKUP)()
    return device_type != "neuron"


@fix(MAX_MEMORY_FIX, "transformers", _auto_map_ignores_neuron, waits_for="transformers.modeling_utils")
def patch_auto_device_map_memory() -> None:
    """``device_map="auto"`` (and "balanced", "sequential") silently loads the whole model on CPU.

    Gap: accelerate's ``get_max_memory`` lists CUDA/XPU/NPU/... devices but not Neuron, so the
    inferred map is ``{"": "cpu"}`` (accelerate 1.16 lists every ``torch.accelerator`` device and
    closes the gap). Detected without touching a device (see ``_auto_map_ignores_neuron``). Patch:
    the ``get_max_memory`` Transformers uses lists each neuron device with its free memory
    (``torch.neuron`` figures) plus the CPU, and accepts ``max_memory={0: "10GiB", "neuron:1": ...,
    "cpu": ...}``; accelerate's placement then fills the neuron devices first and spills to CPU only
    when the model does not fit.
    """
    import transformers.integrations.accelerate as hf_accelerate

    wrap(MAX_MEMORY_FIX, hf_accelerate, "accelerate_max_memory", _max_memory_with_neuron)
