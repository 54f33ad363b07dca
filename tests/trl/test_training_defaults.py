"""Compilation defaults when a TRL trainer is created on Neuron: Dynamo's automatic dynamic shapes off
under ``torch_compile`` (``trl.static_shapes_on_neuron``), a hint when compiling is off
(``trl.neuron_compile_hint``); user settings win."""

from __future__ import annotations

import contextvars
import logging

import pytest
import torch._dynamo.config as dynamo_config
from datasets import load_dataset

from hf_neuron.patching import upstream_behaviour
from hf_neuron.trl import training


def _fresh_dynamo_context() -> contextvars.Context:
    """A context where automatic_dynamic_shapes is back to torch's default (its overrides are context vars)."""
    from torch.utils._config_module import _UNSET_SENTINEL

    context = contextvars.copy_context()
    context.run(dynamo_config._config["automatic_dynamic_shapes"].user_override.set, _UNSET_SENTINEL)
    return context


@pytest.fixture
def make_trainer(tiny_model_dir, chat_dataset, tmp_path):
    from trl import SFTConfig, SFTTrainer

    train = load_dataset("json", data_files=str(chat_dataset), split="train").select_columns(["messages"])

    def make(**overrides):
        args = SFTConfig(
            output_dir=str(tmp_path), report_to="none", max_length=64, bf16=False, gradient_checkpointing=False,
            **overrides,
        )
        return SFTTrainer(model=str(tiny_model_dir), args=args, train_dataset=train)

    return make


def test_compiling_on_neuron_turns_automatic_dynamic_shapes_off(make_trainer, monkeypatch):
    monkeypatch.delenv(training.DYNAMIC_SHAPES_ENV, raising=False)
    context = _fresh_dynamo_context()
    assert context.run(lambda: dynamo_config.automatic_dynamic_shapes) is True
    context.run(make_trainer, torch_compile=True)
    assert context.run(lambda: dynamo_config.automatic_dynamic_shapes) is False


def test_eager_training_leaves_dynamo_alone(make_trainer, monkeypatch):
    monkeypatch.delenv(training.DYNAMIC_SHAPES_ENV, raising=False)
    context = _fresh_dynamo_context()
    context.run(make_trainer, torch_compile=False)
    assert context.run(lambda: dynamo_config.automatic_dynamic_shapes) is True


def test_user_setting_wins(make_trainer, monkeypatch):
    monkeypatch.delenv(training.DYNAMIC_SHAPES_ENV, raising=False)
    context = _fresh_dynamo_context()

    def user_sets_it_then_trains():
        dynamo_config.automatic_dynamic_shapes = True
        make_trainer(torch_compile=True)
        return dynamo_config.automatic_dynamic_shapes

    assert context.run(user_sets_it_then_trains) is True


def test_user_environment_wins(make_trainer, monkeypatch):
    monkeypatch.setenv(training.DYNAMIC_SHAPES_ENV, "1")
    context = _fresh_dynamo_context()
    context.run(make_trainer, torch_compile=True)
    assert context.run(lambda: dynamo_config.automatic_dynamic_shapes) is True


def test_hint_when_not_compiling(make_trainer, monkeypatch, caplog):
    monkeypatch.setattr(training, "_hint_logged", False)
    with caplog.at_level(logging.WARNING, logger="hf_neuron"):
        make_trainer(torch_compile=True)
        assert training.COMPILE_HINT not in caplog.text
        make_trainer(torch_compile=False)
        make_trainer(torch_compile=False)
    assert caplog.text.count(training.COMPILE_HINT) == 1
    assert len(training.COMPILE_HINT.splitlines()) == 1


def test_upstream_leaves_automatic_dynamic_shapes_on(make_trainer, monkeypatch):
    monkeypatch.delenv(training.DYNAMIC_SHAPES_ENV, raising=False)
    context = _fresh_dynamo_context()
    with upstream_behaviour(training.STATIC_SHAPES_FIX):
        context.run(make_trainer, torch_compile=True)
    assert context.run(lambda: dynamo_config.automatic_dynamic_shapes) is True


def test_upstream_says_nothing_when_not_compiling(make_trainer, monkeypatch, caplog):
    monkeypatch.setattr(training, "_hint_logged", False)
    with caplog.at_level(logging.WARNING, logger="hf_neuron"), upstream_behaviour(training.COMPILE_HINT_FIX):
        make_trainer(torch_compile=False)
    assert training.COMPILE_HINT not in caplog.text
