"""Shared fixtures of the Transformers adapter tests (the simulator is installed by tests/conftest.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_cpu_thread():
    # Tiny models on a shared 2-core runner: intra-op threads only contend (eager runs ~10x slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_dynamo():
    """Every test counts the graphs it compiles from an empty Dynamo cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    from hf_neuron.tiny_models import save_tiny_model

    return save_tiny_model("llama", tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tp2_record(tmp_path):
    """``tp2_record(name, model_dir, env=None)``: the tiny checkpoint sharded over 2 ranks under torchrun
    against one device (``_tp_plans_worker.py``); returns its record (``ok``, ``reason``, ``details``)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).parent / "tensor_parallel" / "_tp_plans_worker.py"

    def run(name, model_dir, env=None) -> dict:
        out = tmp_path / f"tp-{name}.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
                   str(out), f"{name}={model_dir}"]
        job_env = {**os.environ, "HF_NEURON_SIMULATOR": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        result = subprocess.run(command, env=job_env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-6000:]
        return json.loads(out.read_text())[name]

    return run


@pytest.fixture
def tp2_only_with_the_fix(tmp_path, tp2_record):
    """``tp2_only_with_the_fix(name, fix, failure)``: the tiny ``name`` (seed 0) sharded over 2 ranks equals
    one device, and with ``fix`` left out (``HF_NEURON_DISABLE``) the same job fails with a reason matching
    the regular expression ``failure``. Returns the passing record."""
    import re

    from hf_neuron.tiny_models import save_tiny_model

    def run(name, fix, failure) -> dict:
        model_dir = save_tiny_model(name, tmp_path / name, seed=0)
        record = tp2_record(name, model_dir)
        assert record["ok"], record["reason"]
        upstream = tp2_record(name, model_dir, env={"HF_NEURON_DISABLE": fix})
        assert not upstream["ok"] and re.search(failure, upstream["reason"]), upstream
        return record

    return run
