"""The `hf-neuron` command line."""

import json

from hf_neuron.cli import main


def test_env_reports_simulated_devices_and_fixes(capsys):
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "SIMULATED" in info["torch_neuronx"]
    assert len(info["devices"]) == 4 and info["devices"][0].startswith("neuron:0 trn2")
    for name in ("torch", "transformers", "diffusers", "trl", "peft", "accelerate", "datasets"):
        assert info["versions"][name] != "not installed"
    assert all({"name", "library", "active", "status"} <= set(f) for f in info["fixes"])


def test_env_check_passes_on_the_installed_releases(capsys):
    """Every fix decides on the installed releases, and each release is in its verified range."""
    from hf_neuron import patching as fixes

    assert main(["env", "--check"]) == 0, capsys.readouterr().err
    assert fixes.unknown_fixes() == []
    assert not [f.name for f in fixes.all_fixes() if f.status == fixes.WAITING]


def test_env_human_readable(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "Neuron devices: 4" in out and "Adapter fixes:" in out


def test_demo_generates_cpu_tokens_on_neuron(capsys):
    assert main(["demo", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "tokens equal to CPU: True" in out


def test_no_command_prints_help(capsys):
    assert main([]) == 2
