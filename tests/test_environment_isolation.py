"""A user's own simulator and Neuron runtime settings do not change what the tests check."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_user_settings_are_cleared_for_the_test_session():
    env = dict(os.environ, HF_NEURON_SIM_DEVICES="1", HF_NEURON_SIM_INSTANCE="trn1", NEURON_RT_VISIBLE_CORES="0",
               NEURON_LOGICAL_NC_CONFIG="1", HF_NEURON_DISABLE="1")
    # This test expects the default simulated machine (4 devices) and the adapters on.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_cli.py::test_env_human_readable", "tests/test_cli.py::test_env_check_passes_on_the_installed_releases"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout
