"""Helpers for the diffusers adapter tests: one torchrun launch checks many classes."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
import torch

CONV_GAP = "convolution_overrideable"


@functools.lru_cache(maxsize=None)
def device_has_conv() -> bool:
    """Whether the (simulated) neuron device runs aten::convolution (the simulator does not yet)."""
    try:
        x = torch.ones(1, 1, 3, 3, device="neuron")
        torch.nn.functional.conv2d(x, torch.ones(1, 1, 1, 1, device="neuron"))
        return True
    except NotImplementedError:
        return False


def hit_conv_gap(record: dict) -> bool:
    return CONV_GAP in json.dumps(record, default=str)


def run_torchrun(module: str, *args: str, timeout: int = 900) -> None:
    """``torchrun --standalone --nproc_per_node=2 -m module args`` with the simulator on in every worker."""
    env = {**os.environ, "HF_NEURON_SIMULATOR": os.environ.get("HF_NEURON_SIMULATOR", "1"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", module, *args]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")


def load_records(path) -> dict[str, dict]:
    with open(path) as f:
        return {record["class"]: record for record in json.load(f)["results"]}
