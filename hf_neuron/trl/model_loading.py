"""How TRL's trainers load a model given by name, on Neuron.

TRL's ``create_model_from_path`` builds every model a trainer gets by name (the policy, reference
and teacher models) from ``model_init_kwargs``. It defaults to ``device_map="auto"`` on any device
but CPU/MPS, and the trainers force ``None`` only for MULTI_GPU/DeepSpeed. On Neuron, "auto" is not
where the process trains (the host, or every Neuron device of the machine once transformers sees
their memory), and with ``DistributedConfig(tp_size>1)`` transformers refuses to load (tensor
parallelism excludes a device_map).

The fix ``trl.neuron_device_map`` sets, where the user left it unset, the process's Neuron device
(``neuron:LOCAL_RANK``, where the Trainer trains), or ``None`` when the ``distributed_config``
shards the model at load time (transformers then puts each shard on the process's device). The
wrapper runs a list of kwarg adjusters, so another Neuron default for this loading path is one
more wrapper of the same function.
"""

from __future__ import annotations

import logging
import os
import sys

from hf_neuron.patching import fix, original, when_imported, wrap
from hf_neuron.patching.sources import function_mentions
from hf_neuron.trl._common import TRAINER_MODULES, UTILS_MODULE

logger = logging.getLogger("hf_neuron")

FIX_NAME = "trl.neuron_device_map"
FUNCTION = "create_model_from_path"
_logged: set[str] = set()


def _log_once(key: str, message: str, *args) -> None:
    if key not in _logged:
        _logged.add(key)
        logger.info(message, *args)


def _as_distributed_config(value):
    if isinstance(value, dict):
        from transformers import DistributedConfig

        return DistributedConfig.from_dict(value)
    return value


def shards_at_load(distributed_config) -> bool:
    """Whether ``from_pretrained(distributed_config=...)`` shards the model over several processes."""
    distributed_config = _as_distributed_config(distributed_config)
    if distributed_config is None:
        return False
    sizes = (
        getattr(distributed_config, "tp_size", 1) or 1,
        getattr(distributed_config, "dp_replicate_size", 1) or 1,
        getattr(distributed_config, "fsdp_size", 1) or 1,
        getattr(distributed_config, "pp_size", 1) or 1,
    )
    return any(size > 1 for size in sizes)


def training_device():
    """The device the Trainer of this process trains on (accelerate's ``PartialState().device``), indexed.

    Single-process accelerate reports an unindexed ``neuron``: that is ``neuron:LOCAL_RANK`` under a
    launcher, else the current Neuron device.
    """
    import torch
    from accelerate import PartialState

    device = PartialState().device
    if device.type == "neuron" and device.index is None:
        local_rank = os.environ.get("LOCAL_RANK")
        index = int(local_rank) if local_rank is not None else torch.neuron.current_device()
        device = torch.device("neuron", index)
    return device


def neuron_device_map(kwargs: dict):
    """The ``device_map`` to use on Neuron when the caller set none: a device, or None when sharding."""
    if shards_at_load(kwargs.get("distributed_config")):
        return None
    return training_device()


# --- where TRL's trainers find create_model_from_path -------------------------------------------


def _wrap_everywhere(fix_name: str, wrapper) -> None:
    """Wrap ``trl.trainer.utils.create_model_from_path`` and every trainer module's own reference to it.

    Trainer modules import the function by name: one imported before the patch holds the upstream
    function, so it is wrapped too; one imported after already holds the wrapped one.
    """

    def patch_utils(utils) -> None:
        if hasattr(utils, FUNCTION):
            wrap(fix_name, utils, FUNCTION, wrapper)

    def patch_trainer_module(module) -> None:
        utils = sys.modules.get(UTILS_MODULE)
        upstream = original(utils, FUNCTION) if utils is not None else None
        if upstream is not None and getattr(module, FUNCTION, None) is upstream:
            wrap(fix_name, module, FUNCTION, wrapper)

    when_imported(UTILS_MODULE, patch_utils)
    for name in TRAINER_MODULES:
        when_imported(name, patch_trainer_module)


# --- trl.neuron_device_map ------------------------------------------------------------------------


def create_model_on_neuron(original_create, model_id, *args, **kwargs):
    """TRL's ``create_model_from_path`` with the Neuron ``device_map`` default."""
    if "device_map" not in kwargs and training_device().type == "neuron":
        kwargs["device_map"] = neuron_device_map(kwargs)
        _log_device_map(model_id, kwargs["device_map"])
    return original_create(model_id, *args, **kwargs)


def _log_device_map(model_id, device_map) -> None:
    _log_once(
        "device_map",
        "hf_neuron: loading %s with device_map=%s (Neuron default; set device_map in model_init_kwargs to "
        "change it).",
        model_id,
        device_map,
    )


def _device_map_gap() -> bool:
    # Upstream closes the gap once create_model_from_path knows about Neuron.
    return function_mentions(UTILS_MODULE, FUNCTION, "neuron") is False


@fix(FIX_NAME, "trl", _device_map_gap)
def install_neuron_device_map() -> None:
    """TRL's `create_model_from_path` defaults to `device_map="auto"` on Neuron, which loads the weights
    on the host before moving them, and with `DistributedConfig(tp_size>1)` makes transformers refuse to
    load (TP excludes a device_map). hf_neuron defaults it to the process's Neuron device, or to None
    when the `distributed_config` shards the model at load time. A device_map the user sets wins.

    Detected from the source of `trl.trainer.utils.create_model_from_path`: it does not mention Neuron.
    """
    _wrap_everywhere(FIX_NAME, create_model_on_neuron)
