"""Helpers for the diffusers adapter tests: one torchrun launch checks many classes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

def run_torchrun(module: str, *args: str, timeout: int = 900, env: dict | None = None) -> None:
    """``torchrun --standalone --nproc_per_node=2 -m module args`` with the simulator on in every worker
    (``env``: extra variables for the workers)."""
    env = {**os.environ, "HF_NEURON_SIMULATOR": os.environ.get("HF_NEURON_SIMULATOR", "1"), "OMP_NUM_THREADS": "1",
           **(env or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", module, *args]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")


def load_records(path) -> dict[str, dict]:
    with open(path) as f:
        return {record["class"]: record for record in json.load(f)["results"]}
