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


# The seed recipe scaled down: packing wrapped, torch_compile, bf16; the same global batch of 4
# sequences in every layout. max_length 192 is not a multiple of 128: full packs would pad to 256
# and the remainder packs to 128 without `trl.pad_packed_to_max_length`.
GLOBAL_BATCH = 4
RECIPE = dict(max_length=192, max_steps=3, gradient_checkpointing="false")
LAYOUTS = {  # name: (processes, TP_SIZE, FSDP_SIZE)
    "single": (1, 1, 1),
    "tp2": (2, 2, 1),
    "fsdp2": (2, 1, 2),
    "tp2_fsdp2": (4, 2, 2),
}


@pytest.fixture(scope="session")
def sft_runs(tiny_model_dir, chat_dataset, tmp_path_factory):
    """``sft_runs(name, **overrides)``: run the example script once per name (cached for the session)."""
    from trl_sft_helpers import base_args, read_results, run_worker

    root = tmp_path_factory.mktemp("sft-runs")
    cache = {}

    def run(name: str, layout: str = "single", **overrides):
        if name not in cache:
            nproc, tp, fsdp = LAYOUTS[layout]
            dataset = overrides.pop("dataset", chat_dataset)
            dp = nproc // tp
            args = dict(RECIPE, per_device_train_batch_size=GLOBAL_BATCH // dp)
            args.update(overrides)
            out, results = root / name / "model", root / name / "results"
            proc = run_worker(
                nproc, base_args(tiny_model_dir, dataset, out, **args), results,
                env={"TP_SIZE": str(tp), "FSDP_SIZE": str(fsdp)},
            )
            assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-6000:]}"
            cache[name] = {"out": out, "results": read_results(results), "result_dir": results}
        return cache[name]

    return run
