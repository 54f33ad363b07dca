"""Fixtures of the TRL tests: a tiny Qwen3 (the family of the announcement's SFT recipe) and a small local chat dataset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_sft_helpers import GLOBAL_BATCH, LAYOUTS, RECIPE, chat_rows, write_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(built_once) -> Path:
    from hf_neuron.tiny_models import save_tiny_model

    return built_once("trl-tiny-qwen3", lambda path: save_tiny_model("qwen3", path / "tiny-qwen3")) / "tiny-qwen3"


@pytest.fixture(scope="session")
def chat_dataset(built_once) -> Path:
    """64 short two-turn conversations, as one JSONL file with a `messages` column (and another one)."""
    return built_once("trl-data", lambda path: write_jsonl(path / "chat.jsonl", chat_rows(64))) / "chat.jsonl"


@pytest.fixture(scope="session")
def sft_runs(tiny_model_dir, chat_dataset, built_once):
    """``sft_runs(name, layout=..., script=..., recipe=..., env=..., **overrides)``: run the example script (or
    ``script``, a user's script with the announcement recipe's structure) once per name and test run (whichever
    xdist worker asks first), on the tiny Qwen3 (or the checkpoint in ``model_dir``). ``recipe`` gives the base
    flags (``RECIPE``: 3 steps), ``overrides`` change them. A name asked for again with other settings fails."""
    import hashlib
    import json

    from trl_sft_helpers import base_args, read_results, run_worker

    read = {}  # name: (settings, run) already read by this worker

    def run(name: str, layout: str = "single", script=None, recipe=None, env=None, model_dir=None, **overrides):
        nproc, tp, fsdp = LAYOUTS[layout]
        dataset = overrides.pop("dataset", chat_dataset)
        dp = nproc // tp
        args = dict(RECIPE if recipe is None else recipe)
        args.setdefault("per_device_train_batch_size", GLOBAL_BATCH // dp)
        args.update(overrides)
        run_env = {"TP_SIZE": str(tp), "FSDP_SIZE": str(fsdp), **(env or {})}
        model = tiny_model_dir if model_dir is None else model_dir
        # What makes the run (files by content: workers write their own copies of a test's script)
        settings = json.dumps({"layout": layout, "args": args, "env": run_env, "model": Path(model).name,
                               "dataset": Path(dataset).name,
                               "script": script and hashlib.sha256(Path(script).read_bytes()).hexdigest()},
                              sort_keys=True, default=str)

        def build(path: Path):
            if script is not None:
                run_env["TRL_SFT_USER_SCRIPT"] = str(script)
            proc = run_worker(nproc, base_args(model, dataset, path / "model", **args), path / "results", env=run_env)
            assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-6000:]}"
            (path / "settings.json").write_text(settings)

        if name not in read:
            folder = built_once(f"sft-runs/{name}", build)
            read[name] = ((folder / "settings.json").read_text(), {
                "out": folder / "model", "results": read_results(folder / "results"), "result_dir": folder / "results"})
        assert read[name][0] == settings, f"run {name!r} asked for with other settings"
        return read[name][1]

    return run


@pytest.fixture(autouse=True)
def _restore_dynamo_dynamic_shapes():
    """A trainer created on Neuron turns Dynamo's automatic dynamic shapes off for the process (the
    ``trl.static_shapes_on_neuron`` fix); later tests in this process get the default back."""
    import torch._dynamo.config as dynamo_config

    before = dynamo_config.automatic_dynamic_shapes
    yield
    dynamo_config.automatic_dynamic_shapes = before
