"""An interrupted save leaves no half-written checkpoint where the previous one was: TRL trainers'
``checkpoint-N`` (fix ``trl.atomic_checkpoints``) and the example script's final model."""

from __future__ import annotations

import hashlib
import os

import pytest
from datasets import load_dataset

from trl_sft_helpers import load_script


class Interrupted(RuntimeError):
    pass


def _trainer(model_dir, dataset_path, out, **overrides):
    from trl import SFTConfig, SFTTrainer

    config = dict(
        output_dir=str(out), report_to="none", max_steps=4, save_strategy="steps", save_steps=2,
        save_only_model=True, per_device_train_batch_size=2, max_length=64, logging_steps=1,
        gradient_checkpointing=False, bf16=False, disable_tqdm=True, seed=0,
        model_init_kwargs={"dtype": "float32"},
    )
    config.update(overrides)
    train = load_dataset("json", data_files=str(dataset_path), split="train").select_columns(["messages"])
    return SFTTrainer(model=str(model_dir), args=SFTConfig(**config), train_dataset=train)


def _interrupt_save_of(trainer, monkeypatch, target_name: str):
    """Make the Trainer's weight write for a folder named `target_name` stop right after the weights."""
    original = trainer._save

    def _save(output_dir=None, state_dict=None):
        original(output_dir, state_dict=state_dict)
        if os.path.basename(os.path.normpath(output_dir)) == target_name:
            raise Interrupted(f"stopped while saving {output_dir}")

    monkeypatch.setattr(trainer, "_save", _save)


def _digest(folder) -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(folder))
        if os.path.isfile(os.path.join(folder, name))
    }


def test_interrupted_checkpoint_is_not_published(tiny_model_dir, chat_dataset, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM
    from transformers.trainer_utils import get_last_checkpoint

    out = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, chat_dataset, out)
    _interrupt_save_of(trainer, monkeypatch, "checkpoint-4")
    with pytest.raises(Interrupted):
        trainer.train()

    assert not (out / "checkpoint-4").exists()
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    previous = out / "checkpoint-2"
    assert (previous / "trainer_state.json").exists() and (previous / "model.safetensors").exists()
    AutoModelForCausalLM.from_pretrained(previous, device_map="cpu")  # complete and loadable


def test_upstream_leaves_a_partial_checkpoint(tiny_model_dir, chat_dataset, tmp_path, monkeypatch):
    """The gap the fix closes: with TRL's base trainer saving as upstream does, checkpoint-4 is partial."""
    from transformers.trainer_utils import get_last_checkpoint

    from hf_neuron.patching import upstream_behaviour

    out = tmp_path / "run"
    with upstream_behaviour("trl.atomic_checkpoints"):
        trainer = _trainer(tiny_model_dir, chat_dataset, out)
        _interrupt_save_of(trainer, monkeypatch, "checkpoint-4")
        with pytest.raises(Interrupted):
            trainer.train()
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-4")
    assert not (out / "checkpoint-4" / "trainer_state.json").exists()  # half-written, yet picked for resuming


def test_completed_checkpoints_and_rotation(tiny_model_dir, chat_dataset, tmp_path):
    out = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, chat_dataset, out, save_total_limit=1)
    trainer.train()
    names = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert names == ["checkpoint-4"], names
    assert (out / "checkpoint-4" / "trainer_state.json").exists()


def test_interrupted_final_save_keeps_previous_model(tiny_model_dir, chat_dataset, tmp_path, monkeypatch):
    script = load_script()
    out = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, chat_dataset, out, save_strategy="no", max_steps=1)
    trainer.train()
    script.save_model_atomically(trainer, str(out))  # a first, complete final model
    before = _digest(out)
    assert "model.safetensors" in before and "config.json" in before

    trainer.args.max_steps = 2
    trainer.train()
    _interrupt_save_of(trainer, monkeypatch, script.STAGING_DIR)
    with pytest.raises(Interrupted):
        script.save_model_atomically(trainer, str(out))
    assert _digest(out) == before  # every file of the previous model as it was
