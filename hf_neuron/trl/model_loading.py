"""Where TRL's trainers load a model given by name, on Neuron (fix ``trl.neuron_device_map``).

TRL's ``create_model_from_path`` (used by every trainer for ``model="name"``, reference and teacher
models) defaults to ``device_map="auto"`` on any device but CPU/MPS, and the trainers force
``device_map=None`` only for MULTI_GPU/DeepSpeed. On Neuron that means:

- without ``distributed_config``: "auto" does not place weights on a Neuron device, so the model
  loads on the host and is moved afterwards (twice the host memory, a slow copy);
- with ``DistributedConfig(tp_size=..)``: transformers rejects tensor parallelism together with any
  ``device_map``, so the user has to know to pass ``device_map=None``.

The fix gives ``create_model_from_path`` a Neuron default when the caller did not choose one: the
process's own device (``neuron:LOCAL_RANK``, the device the Trainer trains on), or ``None`` when a
``distributed_config`` shards the model at load time (transformers then puts each shard on the
process's device itself).
"""

from __future__ import annotations

import logging
import os
import sys

from hf_neuron.fixes import fix
from hf_neuron.trl._common import TRAINER_MODULES, UTILS_MODULE, function_source_mentions, mark_patched, when_ready

logger = logging.getLogger("hf_neuron")

_original = None
_logged = False


def shards_at_load(distributed_config) -> bool:
    """Whether ``from_pretrained(distributed_config=...)`` shards the model over several processes."""
    if distributed_config is None:
        return False
    if isinstance(distributed_config, dict):
        from transformers import DistributedConfig

        distributed_config = DistributedConfig.from_dict(distributed_config)
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


def _wrap(original):
    def create_model_from_path(model_id, *args, **kwargs):
        if "device_map" not in kwargs:
            device = training_device()
            if device.type == "neuron":
                kwargs["device_map"] = neuron_device_map(kwargs)
                global _logged
                if not _logged:
                    _logged = True
                    logger.info(
                        "hf_neuron: loading %s with device_map=%s (Neuron default; pass device_map in "
                        "model_init_kwargs to change it).",
                        model_id,
                        kwargs["device_map"],
                    )
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


def _gap() -> bool:
    # Upstream closes the gap once create_model_from_path (or the trainers) know about Neuron.
    mentions = function_source_mentions(UTILS_MODULE, "create_model_from_path", "neuron")
    return mentions is False


@fix("trl.neuron_device_map", "trl", _gap)
def install_neuron_device_map() -> None:
    """TRL's `create_model_from_path` defaults to `device_map="auto"` on Neuron, which loads the weights
    on the host before moving them, and with `DistributedConfig(tp_size>1)` makes transformers refuse to
    load (TP excludes a device_map). hf_neuron defaults it to the process's Neuron device, or to None
    when the `distributed_config` shards the model at load time. A device_map the user sets wins.

    Detected from the source of `trl.trainer.utils.create_model_from_path`: it does not mention Neuron.
    """
    when_ready(UTILS_MODULE, _patch_utils)
    for name in TRAINER_MODULES:
        when_ready(name, _rebind_trainer_module)
