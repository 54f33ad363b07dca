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


def test_warmup_command_compiles_the_planned_graphs_once(tmp_path, capsys, monkeypatch):
    from hf_neuron.tiny_models import save_tiny_model

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    model = save_tiny_model("llama", tmp_path / "llama")
    workload = [str(model), "--batch-sizes", "1,2", "--max-cache-len", "128", "--prefill-chunk", "32"]
    assert main(["plan", *workload]) == 0
    assert "graphs: 4" in capsys.readouterr().out
    assert main(["warmup", *workload]) == 0
    out = capsys.readouterr().out
    assert "warm-up: 4 graphs" in out and "compiled (cache misses): 4" in out, out
    assert main(["warmup", *workload]) == 0  # again: every graph is loaded from the cache
    out = capsys.readouterr().out
    assert "compiled (cache misses): 0, loaded from the cache: 4" in out, out


def test_plan_and_warmup_reject_a_missing_model(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope")]) == 2
    assert "no such model folder" in capsys.readouterr().err
    assert main(["warmup", str(tmp_path / "nope")]) == 2
    assert "not a local model folder" in capsys.readouterr().err


def test_env_prints_only_its_report():
    """Deciding the fixes runs upstream code (a tiny Mamba forward) that logs kernel fall-back warnings for
    model users; ``hf-neuron env`` prints its report, not those."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_NEURON_SIMULATOR": "1"}
    done = subprocess.run([sys.executable, "-m", "hf_neuron.cli", "env"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "fixes" in done.stdout
    assert "falling back" not in done.stderr and "[transformers]" not in done.stderr, done.stderr
