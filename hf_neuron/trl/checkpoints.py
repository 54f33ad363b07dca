"""Checkpoints that appear whole or not at all (fix ``trl.atomic_checkpoints``).

The Trainer writes ``checkpoint-N`` in place. A run stopped while saving (preempted instance, OOM
kill, a Neuron job hitting its time limit) leaves a partial ``checkpoint-N`` that
``get_last_checkpoint`` / ``resume_from_checkpoint=True`` then picks over the last complete one.

For TRL trainers, hf_neuron writes each checkpoint into ``tmp-checkpoint-N/`` next to it (a name the
Trainer's checkpoint discovery and rotation ignore) and renames it to ``checkpoint-N`` once every
process has finished writing; older checkpoints are rotated only after that.
"""

from __future__ import annotations

import logging
import os
import shutil

from hf_neuron.patching import fix, mark_closed, when_imported, wrap
from hf_neuron.patching.sources import module_path
from hf_neuron.trl._common import BASE_TRAINER_MODULE

logger = logging.getLogger("hf_neuron")

FIX_NAME = "trl.atomic_checkpoints"
STAGING_PREFIX = "tmp-"


def _checkpoint_prefix() -> str:
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return PREFIX_CHECKPOINT_DIR


def _wait(trainer) -> None:
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        accelerator.wait_for_everyone()


def _publish(staged: str, final: str) -> None:
    """Move the complete ``staged`` directory to ``final`` (replacing an older copy of the same step)."""
    if os.path.exists(final):
        previous = f"{final}.replaced"
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(final, previous)
        os.replace(staged, final)
        shutil.rmtree(previous, ignore_errors=True)
    else:
        os.replace(staged, final)


def save_checkpoint_atomically(trainer, save_checkpoint, model, trial) -> None:
    """Run ``save_checkpoint(model, trial)`` (the Trainer's) into a staging directory, then publish it."""
    run_dir = trainer._get_output_dir(trial=trial)
    name = f"{_checkpoint_prefix()}-{trainer.state.global_step}"
    staging_root = os.path.join(run_dir, f"{STAGING_PREFIX}{name}")
    final = os.path.join(run_dir, name)
    args = trainer.args

    if args.should_save:
        shutil.rmtree(staging_root, ignore_errors=True)  # left by an earlier interrupted save
    _wait(trainer)

    trainer._get_output_dir = lambda trial=None: staging_root  # the Trainer builds checkpoint-N under it
    try:
        save_checkpoint(model, trial)
    finally:
        del trainer._get_output_dir
    _wait(trainer)

    if args.should_save:
        _publish(os.path.join(staging_root, name), final)
        shutil.rmtree(staging_root, ignore_errors=True)
        state = trainer.state
        if state.best_model_checkpoint and state.best_model_checkpoint.startswith(staging_root + os.sep):
            state.best_model_checkpoint = os.path.join(run_dir, os.path.basename(state.best_model_checkpoint))
            state.save_to_json(os.path.join(final, "trainer_state.json"))
        from transformers.trainer_utils import rotate_checkpoints

        rotate_checkpoints(
            output_dir=run_dir,
            save_total_limit=args.save_total_limit,
            best_model_checkpoint=state.best_model_checkpoint,
            use_mtime=True,
        )
    _wait(trainer)


def trainer_saves_in_place() -> bool:
    """Whether transformers' ``Trainer._save_checkpoint`` writes ``checkpoint-N`` where it ends up."""
    import inspect

    from transformers import Trainer

    save = getattr(Trainer, "_save_checkpoint", None)
    if save is None or not hasattr(Trainer, "_get_output_dir"):
        return False  # not a Trainer this fix knows how to stage
    source = inspect.getsource(save)
    return "os.replace" not in source and "os.rename" not in source


def _save_checkpoint(inherited, self, model, trial):
    if getattr(self.args, "push_to_hub", False):
        # Hub pushes read the checkpoint folder by name while it is written: keep upstream's path.
        return inherited(self, model, trial)
    save_checkpoint_atomically(self, lambda m, t: inherited(self, m, t), model, trial)


def _patch_base_trainer(module) -> None:
    cls = getattr(module, "_BaseTrainer", None)
    if cls is None:
        return
    if not trainer_saves_in_place():
        mark_closed(FIX_NAME, "upstream Trainer already publishes checkpoints atomically")
        return
    wrap(FIX_NAME, cls, "_save_checkpoint", _save_checkpoint)


def _gap() -> bool:
    # Confirmed from the Trainer's source when TRL's base trainer is imported (importing transformers
    # here, possibly in the middle of `import torch`, is not safe); present until then.
    return module_path(BASE_TRAINER_MODULE) is not None


@fix(FIX_NAME, "trl", _gap)
def install_atomic_checkpoints() -> None:
    """The Trainer writes `checkpoint-N` in place, so a run stopped mid-save leaves a partial checkpoint
    that resuming picks over the last complete one. For TRL trainers, hf_neuron writes it to
    `tmp-checkpoint-N/` and renames it once every process is done.

    Detected when TRL's base trainer is imported, from `Trainer._save_checkpoint`: it neither renames nor
    replaces the folder it writes.
    """
    when_imported(BASE_TRAINER_MODULE, _patch_base_trainer)
