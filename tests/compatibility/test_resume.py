"""Durability: an interrupted run resumes where it stopped; --rerun-failed retries only failures."""

import os
import signal
import subprocess
import sys
import time

from compat_helpers import load, records, ran, run_compat


def test_interrupted_run_resumes(test_archs, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    names = [f"_test_slow_{i}" for i in range(6)]
    env = {**os.environ, "HF_NEURON_COMPAT_TEST_SLOW": "0.4"}
    cmd = [sys.executable, "-m", "hf_neuron.cli", "compat", "--device", "cpu", "--no-progress", "-j", "1",
           "--levels", "L1,L2", "--arch", ",".join(names), "--output", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists() and len(load(out)["architectures"]) >= 2:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"--resume" in err
    done = set(records(out))  # the file is complete and valid after the interruption
    assert 2 <= len(done) < len(names)

    test_archs.write_text("")
    monkeypatch.setenv("HF_NEURON_COMPAT_TEST_SLOW", "0")
    assert run_compat("--arch", ",".join(names), "--levels", "L1,L2", "--resume", "--output", out) == 0
    rerun = {name for name, _ in ran(test_archs)}
    assert rerun == set(names) - done
    final = records(out)
    assert set(final) == set(names)
    assert all(r["levels"]["L1"] == r["levels"]["L2"] == "pass" for r in final.values())


def test_rerun_failed_reruns_only_failures(test_archs, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    archs = "_test_pass_a,_test_flaky_b,_test_pass_c"
    assert run_compat("--arch", archs, "--levels", "L1,L2", "--output", out) == 0
    assert records(out)["_test_flaky_b"]["levels"]["L2"] == "fail"

    test_archs.write_text("")
    monkeypatch.setenv("HF_NEURON_COMPAT_TEST_FIXED", "1")
    assert run_compat("--arch", archs, "--levels", "L1,L2", "--rerun-failed", "--output", out) == 0
    assert {name for name, _ in ran(test_archs)} == {"_test_flaky_b"}
    recs = records(out)
    assert recs["_test_flaky_b"]["levels"]["L2"] == "pass" and recs["_test_flaky_b"]["failure"] is None
    assert set(recs) == set(archs.split(","))


def test_resume_runs_levels_added_later(test_archs, tmp_path):
    out = tmp_path / "r.json"
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1", "--output", out) == 0
    assert records(out)["_test_pass_a"]["skip_reasons"]["L2"] == "level not requested in this run"
    test_archs.write_text("")
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1,L2", "--resume", "--output", out) == 0
    assert records(out)["_test_pass_a"]["levels"]["L2"] == "pass"
    assert ran(test_archs)  # it ran again for the missing level
    test_archs.write_text("")
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1,L2", "--resume", "--output", out) == 0
    assert ran(test_archs) == []  # nothing missing: nothing runs


def test_results_of_another_configuration_are_not_overwritten(test_archs, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1", "--output", out) == 0
    data = load(out)
    data["transformers_version"] = "0.0.1"
    out.write_text(__import__("json").dumps(data))
    before = out.read_text()
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1", "--resume", "--output", out) == 2
    assert "transformers 0.0.1" in capsys.readouterr().err
    assert out.read_text() == before


def test_an_all_sweep_records_the_causal_lm_mapping_as_its_denominator(tmp_path, monkeypatch):
    """``--all`` records Transformers' causal-LM mapping in the results file (the all-types headline's
    denominator), even when every type was recorded before and nothing runs."""
    from hf_neuron.compat import archs
    from hf_neuron.compat import results as R

    out = tmp_path / "r.json"
    results = R.new_results(*_versions(), "cpu")
    for spec in archs.select(all_archs=True):
        rec = R.new_record(spec)
        R.set_level(rec, "L1", "pass")
        R.upsert(results, rec)
    R.write_atomic(out, results)
    assert run_compat("--all", "--resume", "--levels", "L1", "--output", out) == 0
    written = load(out)
    assert written["causal_lm_types"] == sorted(archs.causal_lm_model_types())
    assert R.summarize_all_types(written)["types"] == len(archs.causal_lm_model_types())


def _versions():
    import importlib.metadata

    return importlib.metadata.version("transformers"), importlib.metadata.version("torch")
