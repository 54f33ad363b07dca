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
more adjuster, not a second wrapper.
"""

from __future__ import annotations

import logging
import os
import sys

from hf_neuron.fixes import fix
from hf_neuron.trl._common import TRAINER_MODULES, UTILS_MODULE, function_source_mentions, mark_patched, when_ready

logger = logging.getLogger("hf_neuron")

_original = None
# name -> adjust(model_id, args, kwargs) run in registration order before TRL's create_model_from_path.
_adjusters: dict[str, object] = {}
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


# --- the wrapper ----------------------------------------------------------------------------------


def _wrap(original):
    def create_model_from_path(model_id, *args, **kwargs):
        for adjust in list(_adjusters.values()):
            adjust(model_id, args, kwargs)
        return original(model_id, *args, **kwargs)

    return mark_patched(create_model_from_path, original)


def _patch_utils(module) -> None:
    global _original
    current = getattr(module, "create_model_from_path", None)
    if current is None or getattr(current, "__hf_neuron_patched__", False):
        return
    _original = current
    patched = _wrap(current)
    module.create_model_from_path = patched
    # Trainer modules imported before us hold their own reference to the original.
    for name in TRAINER_MODULES:
        trainer_module = sys.modules.get(name)
        if trainer_module is not None and getattr(trainer_module, "create_model_from_path", None) is current:
            trainer_module.create_model_from_path = patched


def _rebind_trainer_module(module) -> None:
    utils = sys.modules.get(UTILS_MODULE)
    patched = getattr(utils, "create_model_from_path", None)
    if (
        patched is not None
        and getattr(patched, "__hf_neuron_patched__", False)
        and getattr(module, "create_model_from_path", None) is _original
    ):
        module.create_model_from_path = patched


def _install(name: str, adjust) -> None:
    _adjusters[name] = adjust
    when_ready(UTILS_MODULE, _patch_utils)
    for module in TRAINER_MODULES:
        when_ready(module, _rebind_trainer_module)


# --- trl.neuron_device_map ------------------------------------------------------------------------


def adjust_device_map(model_id, args, kwargs) -> None:
    if "device_map" in kwargs or training_device().type != "neuron":
        return
    kwargs["device_map"] = neuron_device_map(kwargs)
    _log_once(
        "device_map",
        "hf_neuron: loading %s with device_map=%s (Neuron default; set device_map in model_init_kwargs to "
        "change it).",
        model_id,
        kwargs["device_map"],
    )


def _device_map_gap() -> bool:
    # Upstream closes the gap once create_model_from_path knows about Neuron.
    return function_source_mentions(UTILS_MODULE, "create_model_from_path", "neuron") is False


@fix("trl.neuron_device_map", "trl", _device_map_gap)
def install_neuron_device_map() -> None:
    """TRL's `create_model_from_path` defaults to `device_map="auto"` on Neuron, which loads the weights
    on the host before moving them, and with `DistributedConfig(tp_size>1)` makes transformers refuse to
    load (TP excludes a device_map). hf_neuron defaults it to the process's Neuron device, or to None
    when the `distributed_config` shards the model at load time. A device_map the user sets wins.

    Detected from the source of `trl.trainer.utils.create_model_from_path`: it does not mention Neuron.
    """
    _install("device_map", adjust_device_map)
