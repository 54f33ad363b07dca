"""Building the simulator's C++ extension: an interrupted earlier build must not hang later ones."""

import os
import subprocess
import sys

import hf_neuron.simulator._extension as ext


def test_leftover_lock_of_an_interrupted_build_is_removed():
    # torch's builder marks a build in progress with a `lock` file in the build folder; a build
    # killed midway (Ctrl-C during the first use) leaves it, and torch's own loader then waits for
    # it forever. Loading must notice the leftover and go on.
    ext.load()  # built, so the child only links against the cached build
    leftover = ext._build_dir(ext._CSRC, "simulator") / "lock"
    leftover.touch()
    env = {k: v for k, v in os.environ.items() if k != "HF_NEURON_SIMULATOR"}
    done = subprocess.run(
        [sys.executable, "-c", "import hf_neuron.simulator._extension as e; e.load(); print('loaded')"],
        capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert "loaded" in done.stdout
    assert "left by an interrupted build" in done.stderr
    assert not leftover.exists()
