"""A Trainium host keeps its torch: installing hf_neuron never installs, upgrades or downgrades torch,
torch-neuronx or torchvision.

TorchNeuron pins torch (torch-neuronx 2.13.3 for torch 2.13, 2.14.3 for torch 2.14), so a host's torch
is whatever its torch-neuronx was built for. The test stands in for that pin with a constraints file of
the installed torch (and torch-neuronx and torchvision, where installed) and asks pip what installing
the hf_neuron wheel would change here while resolving the newest releases the declared ranges allow, as
on a host that lacks them (``--upgrade --upgrade-strategy eager``): nothing of those three.

The answer comes from the package index. Where pip cannot reach it the test fails and says so rather
than skipping: a skip would let a run pass that never checked the install, and every place the suite
runs (the README's set-up, CI) installs from that index anyway.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from hf_neuron.versions import installed_version

ROOT = Path(__file__).resolve().parents[1]
#: What a Trainium host's TorchNeuron fixes: never to be changed by installing hf_neuron.
HOST_PINNED = ("torch", "torch-neuronx", "torchvision")
#: The torch minors TorchNeuron releases are built for (torch-neuronx 2.13.3 and 2.14.3).
TORCHNEURON_TORCH_MINORS = ("2.13", "2.14")
#: What pip prints when the index cannot be reached (it may then resolve from what is installed and succeed).
UNREACHABLE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
               "Name or service not known", "Could not fetch URL", "ConnectTimeout", "ReadTimeoutError", "ProxyError",
               "Max retries exceeded")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_declared_torch_range_admits_both_torchneuron_torch_minors():
    (torch_range,) = _script("_environments").declared_ranges(("torch",)).values()
    refused = [f"{minor}.{patch}" for minor in TORCHNEURON_TORCH_MINORS for patch in range(10)
               if not torch_range.contains(f"{minor}.{patch}")]
    assert refused == [], f"pyproject.toml's torch{torch_range} refuses TorchNeuron's torch {refused}"


@pytest.mark.slow
def test_installing_hf_neuron_keeps_the_hosts_torch(tmp_path):
    host = {name: version for name in HOST_PINNED if (version := installed_version(name))}
    assert "torch" in host
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in host.items()))
    wheel = _script("wheel_check").build_wheel(tmp_path / "wheel")
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
               "--disable-pip-version-check", "--no-input", "--retries", "1", "--timeout", "30",
               "--upgrade", "--upgrade-strategy", "eager", "-c", str(constraints), str(wheel)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)

    unreachable = [line for line in done.stderr.splitlines() if any(sign in line for sign in UNREACHABLE)]
    if unreachable:
        pytest.fail(f"pip could not reach the package index: this test asks it what installing hf_neuron would "
                    f"change; run it where the index is reachable. pip said ({len(unreachable)} such lines):\n"
                    f"{unreachable[0]}", pytrace=False)
    assert done.returncode == 0, (f"pip cannot install hf_neuron beside the host's {host} (TorchNeuron's pin):\n"
                                  f"{done.stderr[-3000:]}")
    changes = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
               for item in json.loads(report.read_text())["install"]}
    assert "hf-neuron" in changes  # the report is of this install
    assert {name: version for name, version in changes.items() if name in HOST_PINNED} == {}, \
        f"installing hf_neuron would change the host's {host}"


def test_an_environment_of_another_checkout_gets_this_checkouts_editable_install(tmp_path, monkeypatch):
    """The scripts' environments live outside the checkout (a fresh clone reuses them): one whose pins
    match but which another checkout built is given this checkout's editable install, nothing else."""
    environments = _script("_environments")
    venv = tmp_path / "oldest"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    pins = {"torch": "2.13.0"}
    (venv / "pins.txt").write_text("torch==2.13.0\n")
    (venv / "project-requirements.json").write_text(environments._project_requirements())
    (venv / "checkout.txt").write_text(str(tmp_path / "another-clone"))
    commands = []
    monkeypatch.setattr(environments.subprocess, "run", lambda command, **kwargs: commands.append(command))
    install = ["torch==2.13.0", "-e", f"{environments.ROOT}[test]"]
    assert environments.ensure_venv(venv, pins, install, "test") == venv / "bin" / "python"
    (command,) = commands
    assert command[-3:] == ["--no-deps", "-e", str(environments.ROOT)] and command[0] == str(venv / "bin" / "python")
    assert (venv / "checkout.txt").read_text() == str(environments.ROOT)
    # now it is this checkout's: reused as it is
    environments.ensure_venv(venv, pins, install, "test")
    assert len(commands) == 1
