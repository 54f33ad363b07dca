"""scripts/sft_neuron_example.py: local model/dataset inputs, and bad input rejected with a clear error
before anything is loaded onto a device or written."""

from __future__ import annotations

import os
from pathlib import Path
import subprocess
import sys

import pytest

from trl_sft_helpers import SCRIPT, base_args, chat_rows, load_script, write_jsonl


@pytest.fixture(scope="module")
def script():
    return load_script()


@pytest.fixture
def no_training(monkeypatch, script):
    """Fail the test if the script gets as far as building a trainer."""

    def refuse(*args, **kwargs):
        raise AssertionError("the script built a trainer: the input should have been rejected before")

    monkeypatch.setattr(script, "SFTTrainer", refuse)


@pytest.fixture
def layout(monkeypatch):
    def set_layout(world_size: int, tp: int | None = None, fsdp: int | None = None):
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
        for name, value in (("TP_SIZE", tp), ("FSDP_SIZE", fsdp)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))

    return set_layout


def test_layout_must_cover_world_size(script, layout, no_training, tiny_model_dir, chat_dataset, tmp_path):
    layout(world_size=4, tp=2, fsdp=1)
    out = tmp_path / "out"
    with pytest.raises(script.ConfigurationError, match=r"TP_SIZE \* FSDP_SIZE = 2 \* 1 = 2, but 4 process"):
        script.build_trainer(base_args(tiny_model_dir, chat_dataset, out))
    assert not out.exists()


def test_default_layout_is_fsdp_over_all_processes(script, layout):
    layout(world_size=4)
    assert script.parallel_layout() == (1, 4, 4)
    layout(world_size=4, tp=2)
    assert script.parallel_layout() == (2, 2, 4)


def test_heads_must_divide_by_tp(script, layout, no_training, tiny_model_dir, chat_dataset, tmp_path):
    layout(world_size=3, tp=3, fsdp=1)  # the tiny model has 4 attention heads
    out = tmp_path / "out"
    with pytest.raises(script.ConfigurationError, match=r"TP_SIZE=3 does not divide .*num_attention_heads=4"):
        script.build_trainer(base_args(tiny_model_dir, chat_dataset, out))
    assert not out.exists()


def test_dataset_needs_messages(script, layout, no_training, tiny_model_dir, tmp_path):
    layout(world_size=1)
    data = write_jsonl(tmp_path / "text.jsonl", [{"text": "hello"}, {"text": "world"}])
    out = tmp_path / "out"
    with pytest.raises(script.ConfigurationError, match=r"no 'messages' column \(it has \['text'\]\)"):
        script.build_trainer(base_args(tiny_model_dir, data, out))
    assert not out.exists()


def test_missing_split_is_named(script, layout, no_training, tiny_model_dir, tmp_path):
    layout(world_size=1)
    folder = write_jsonl(tmp_path / "data" / "train.jsonl", chat_rows(4)).parent
    with pytest.raises(script.ConfigurationError, match=r"no split 'train_sft' \(it has \['train'\]\)"):
        script.build_trainer(base_args(tiny_model_dir, folder, tmp_path / "out", dataset_train_split="train_sft"))


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_local_dataset_keeps_only_messages(script, kind, tmp_path):
    from trl import ScriptArguments

    path = write_jsonl(tmp_path / "data" / "train.jsonl", chat_rows(5))
    name = str(path if kind == "file" else path.parent)
    train = script.load_chat_dataset(ScriptArguments(dataset_name=name))
    assert train.column_names == ["messages"]
    assert len(train) == 5
    assert train[0]["messages"][0]["role"] == "user"


def test_command_line_error_is_one_clear_line(tiny_model_dir, tmp_path):
    data = write_jsonl(tmp_path / "text.jsonl", [{"text": "hello"}])
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *base_args(tiny_model_dir, data, tmp_path / "out")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "WORLD_SIZE": "1", "HF_NEURON_SIMULATOR": "1"},
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: dataset") and "'messages'" in last, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_no_neuron_workaround_in_the_script(script, tiny_model_dir, chat_dataset, tmp_path):
    """The adapters keep the shapes static: the script keeps TRL's defaults (the last batch is trained)."""
    _, config, _ = script.parse_args(base_args(tiny_model_dir, chat_dataset, tmp_path / "out"))
    assert config.dataloader_drop_last is False
    source = Path(script.__file__).read_text()
    assert "automatic_dynamic_shapes" not in source and "HF_DEACTIVATE_ASYNC_LOAD" not in source
