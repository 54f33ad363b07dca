"""Fixtures of the TRL tests: a tiny Qwen3 (the family of the announcement's SFT recipe) and a small local chat dataset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_sft_helpers import GLOBAL_BATCH, LAYOUTS, RECIPE, chat_rows, write_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from hf_neuron.tiny_models import save_tiny_model

    return save_tiny_model("qwen3", tmp_path_factory.mktemp("trl") / "tiny-qwen3")


@pytest.fixture(scope="session")
def chat_dataset(tmp_path_factory) -> Path:
    """64 short two-turn conversations, as one JSONL file with a `messages` column (and another one)."""
    return write_jsonl(tmp_path_factory.mktemp("trl-data") / "chat.jsonl", chat_rows(64))


@pytest.fixture(scope="session")
def sft_runs(tiny_model_dir, chat_dataset, tmp_path_factory):
    """``sft_runs(name, layout=..., script=..., recipe=..., env=..., **overrides)``: run the example script (or
    ``script``, a user's script with the announcement recipe's structure) once per name, cached for the
    session, on the tiny Qwen3 (or the checkpoint in ``model_dir``). ``recipe`` gives the base flags (``RECIPE``: 3 steps), ``overrides`` change them."""
    from trl_sft_helpers import base_args, read_results, run_worker

    root = tmp_path_factory.mktemp("sft-runs")
    cache = {}

    def run(name: str, layout: str = "single", script=None, recipe=None, env=None, model_dir=None, **overrides):
        if name not in cache:
            nproc, tp, fsdp = LAYOUTS[layout]
            dataset = overrides.pop("dataset", chat_dataset)
            dp = nproc // tp
            args = dict(RECIPE if recipe is None else recipe)
            args.setdefault("per_device_train_batch_size", GLOBAL_BATCH // dp)
            args.update(overrides)
            out, results = root / name / "model", root / name / "results"
            run_env = {"TP_SIZE": str(tp), "FSDP_SIZE": str(fsdp), **(env or {})}
            if script is not None:
                run_env["TRL_SFT_USER_SCRIPT"] = str(script)
            model = tiny_model_dir if model_dir is None else model_dir
            proc = run_worker(nproc, base_args(model, dataset, out, **args), results, env=run_env)
            assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-6000:]}"
            cache[name] = {"out": out, "results": read_results(results), "result_dir": results}
        return cache[name]

    return run


@pytest.fixture(autouse=True)
def _restore_dynamo_dynamic_shapes():
    """A trainer created on Neuron turns Dynamo's automatic dynamic shapes off for the process (the
    ``trl.static_shapes_on_neuron`` fix); later tests in this process get the default back."""
    import torch._dynamo.config as dynamo_config

    before = dynamo_config.automatic_dynamic_shapes
    yield
    dynamo_config.automatic_dynamic_shapes = before
