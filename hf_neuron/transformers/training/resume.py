"""Resumable checkpoints for models sharded at load time (``DistributedConfig``) on Neuron.

A model loaded with ``from_pretrained(distributed_config=DistributedConfig(tp_size, fsdp_size))`` holds
DTensor shards. The Trainer cannot checkpoint its optimizer state and refuses ``save_only_model=False``
for it ("Resuming is not supported for models sharded at load time"), so a stopped TP x FSDP run on
Trainium starts over (hours of training, and its compiles).

The fix writes, beside the standard checkpoint files, the model and optimizer shards of every rank with
``torch.distributed.checkpoint`` (folder ``sharded_state/``: each rank writes its own shards, no full
tensor is gathered) and, on ``resume_from_checkpoint``, loads them back into the same layout. The
scheduler, trainer state and RNG states are the Trainer's own files.
"""

from __future__ import annotations

import logging
import os

from hf_neuron.devices import trains_on_neuron
from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.sources import module_mentions

logger = logging.getLogger("hf_neuron")

FIX_NAME = "trainer-resume-sharded-models"
SHARDED_STATE = "sharded_state"
SCHEDULER_FILE = "scheduler.pt"
REFUSAL = "Resuming is not supported for models sharded at load time"


def _sharded_on_neuron(model, args) -> bool:
    return trains_on_neuron(args) and bool(getattr(model, "is_distributed_loading_by_transformers", False))


def _sharded_folder(trainer, checkpoint) -> str | None:
    """The checkpoint's ``sharded_state/`` folder, when this trainer's model is sharded on Neuron and has one."""
    if checkpoint is None or not _sharded_on_neuron(trainer.model, trainer.args):
        return None
    folder = os.path.join(checkpoint, SHARDED_STATE)
    return folder if os.path.isdir(folder) else None


def _torch_optimizer(optimizer):
    # Accelerate wraps the optimizer; the state-dict functions need the torch one.
    return getattr(optimizer, "optimizer", optimizer)


def _state(trainer):
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    model = trainer.model
    state = {"model": get_model_state_dict(model)}
    if trainer.optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, _torch_optimizer(trainer.optimizer))
    return state


def _init(original, self, *args, **kwargs):
    """Let the Trainer accept ``save_only_model=False`` for a sharded model (its refusal is the gap)."""
    model = kwargs.get("model", args[0] if args else None)
    training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
    if (
        model is None
        or training_args is None
        or getattr(training_args, "save_only_model", True)
        or not _sharded_on_neuron(model, training_args)
    ):
        return original(self, *args, **kwargs)
    training_args.save_only_model = True
    try:
        original(self, *args, **kwargs)
    finally:
        training_args.save_only_model = False


def _save_optimizer_and_scheduler(original, self, output_dir, *args, **kwargs):
    if not _sharded_on_neuron(self.model, self.args):
        return original(self, output_dir, *args, **kwargs)
    import torch
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(self), checkpoint_id=os.path.join(output_dir, SHARDED_STATE))
    if self.args.should_save and self.lr_scheduler is not None:
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, SCHEDULER_FILE))


def _load_from_checkpoint(original, self, checkpoint, model=None, *args, **kwargs):
    folder = _sharded_folder(self, checkpoint)
    if folder is None:
        return original(self, checkpoint, model, *args, **kwargs)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    state = {"model": get_model_state_dict(self.model)}
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(self.model, state["model"])
    logger.info("hf_neuron: model shards loaded from %s", folder)


def _load_optimizer_and_scheduler(original, self, checkpoint, *args, **kwargs):
    folder = _sharded_folder(self, checkpoint)
    if folder is None:
        return original(self, checkpoint, *args, **kwargs)
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    optimizer = _torch_optimizer(self.optimizer)
    state = {"optimizer": get_optimizer_state_dict(self.model, optimizer)}  # initialises the state to fill
    dcp.load(state, checkpoint_id=folder)
    set_optimizer_state_dict(self.model, optimizer, state["optimizer"])
    scheduler = os.path.join(checkpoint, SCHEDULER_FILE)
    if self.lr_scheduler is not None and os.path.isfile(scheduler):
        self.lr_scheduler.load_state_dict(torch.load(scheduler, weights_only=True))
    logger.info("hf_neuron: optimizer shards loaded from %s", folder)


HOOKS = {
    "__init__": _init,
    "_save_optimizer_and_scheduler": _save_optimizer_and_scheduler,
    "_load_from_checkpoint": _load_from_checkpoint,
    "_load_optimizer_and_scheduler": _load_optimizer_and_scheduler,
}


def _trainer_refuses_sharded_resume() -> bool:
    refuses = module_mentions("transformers.trainer", REFUSAL)
    if refuses is None:
        raise RuntimeError("transformers.trainer source not readable")
    if refuses:
        from transformers.trainer import Trainer

        require_methods(Trainer, HOOKS)
    return refuses


@fix(FIX_NAME, "transformers", _trainer_refuses_sharded_resume, waits_for="transformers.trainer")
def patch_sharded_resume() -> None:
    """The Trainer cannot checkpoint the optimizer of a model sharded at load time (TP x FSDP through
    ``DistributedConfig``) and refuses ``save_only_model=False``: a stopped run cannot resume.

    Detected by the Trainer's refusal in its source. Patch: on Neuron, such a model's checkpoints also hold
    every rank's model and optimizer shards (``torch.distributed.checkpoint``, folder ``sharded_state/``),
    and ``resume_from_checkpoint`` loads them back.
    """
    from transformers.trainer import Trainer

    for name, hook in HOOKS.items():
        wrap(FIX_NAME, Trainer, name, hook)
