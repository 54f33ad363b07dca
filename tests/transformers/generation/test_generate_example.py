"""scripts/generate_neuron_example.py prints the same text with 2 tensor-parallel processes as with one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_neuron.tiny_models import save_tiny_model

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "generate_neuron_example.py"
ARGS = ["--max-new-tokens", "8", "--max-cache-len", "128", "--prefill-chunk-size", "32"]


def _run(command, model_dir):
    env = dict(os.environ, HF_NEURON_SIMULATOR="1", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [*command, str(SCRIPT), "--model", str(model_dir), *ARGS], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.distributed
def test_two_processes_print_the_single_process_text(tmp_path):
    model_dir = save_tiny_model("qwen3", tmp_path / "qwen3")
    single = _run([sys.executable], model_dir)
    parallel = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"], model_dir)
    assert single.count("### ") == 2
    assert parallel == single


def test_prompt_that_does_not_fit_is_refused(tmp_path):
    model_dir = save_tiny_model("qwen3", tmp_path / "qwen3")
    env = dict(os.environ, HF_NEURON_SIMULATOR="1")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(model_dir), "--max-cache-len", "32", "--prefill-chunk-size", "32"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2
    assert "--max-cache-len" in result.stderr
