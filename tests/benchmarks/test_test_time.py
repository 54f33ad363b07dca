"""``benchmarks/test_time.py``: every process of a measured run is counted and its time goes to the test
that started it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/simulator/test_activation.py::test_off_by_default"  # starts one Python process that imports torch


def test_a_test_and_the_process_it_starts_are_accounted(tmp_path):
    out = tmp_path / "analysis.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "test_time.py"), "--output", str(out), "--top", "3",
                             "--", "-q", "-n", "0", "-p", "no:cacheprovider", TEST],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = json.loads(out.read_text())
    assert analysis["pytest_status"] == 0
    assert analysis["processes_by_kind"] == {"pytest": 1, "subprocess": 1}
    split = analysis["tests"][TEST]
    assert split["processes"] == 1
    assert split["cpu: subprocess"] > 0.5  # importing torch
    assert split["imports"] > 0.5  # torch, in the subprocess
    assert split["total"] >= split["cpu: subprocess"]
    assert set(analysis["fixed_costs"]) == {"one process: import torch, transformers, trl, diffusers",
                                            "torchrun x2: start, one all-reduce, exit"}
    assert "costliest 3 tests" in result.stdout and TEST in result.stdout
