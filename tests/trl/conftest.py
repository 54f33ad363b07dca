"""Fixtures of the TRL tests: a tiny Qwen3 (the seed recipe's family) and a small local chat dataset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_sft_helpers import chat_rows, write_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from hf_neuron.testing.tiny_models import save_tiny_model

    return save_tiny_model("qwen3", tmp_path_factory.mktemp("trl") / "tiny-qwen3")


@pytest.fixture(scope="session")
def chat_dataset(tmp_path_factory) -> Path:
    """64 short two-turn conversations, as one JSONL file with a `messages` column (and another one)."""
    return write_jsonl(tmp_path_factory.mktemp("trl-data") / "chat.jsonl", chat_rows(64))
