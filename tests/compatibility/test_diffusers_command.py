"""``hf-neuron compat diffusers``: one command runs every diffusers check and writes the table."""

from __future__ import annotations

import json

import pytest

from hf_neuron.cli import main as cli_main
from hf_neuron.compat.diffusers.run import QUICK_CLASSES, QUICK_FAMILIES
from hf_neuron.compat.diffusers.table import RESULT_FILES


@pytest.mark.distributed
@pytest.mark.slow
def test_quick_writes_a_table_of_passing_rows(tmp_path, monkeypatch, capsys):
    # About 80 s on 2 idle cores: five child processes, two of them torchrun jobs.
    monkeypatch.setenv("HF_NEURON_SIMULATOR", "1")
    table = tmp_path / "diffusers.md"
    assert cli_main(["compat", "diffusers", "--quick", "--check", "--output", str(table)]) == 0
    assert "0 recorded failure(s)" in capsys.readouterr().out

    results = tmp_path / "diffusers-results"
    for key in ("tp", "tp_cpu", "compile"):
        records = json.loads((results / RESULT_FILES[key]).read_text())["results"]
        assert [r["class"] for r in records] == list(QUICK_CLASSES)
        assert all(r["ok"] for r in records), key
    pipelines = json.loads((results / RESULT_FILES["pipelines"]).read_text())["results"]
    assert [p["family"] for p in pipelines] == list(QUICK_FAMILIES)
    assert all(p["ok"] for p in pipelines)

    text = table.read_text()
    assert "Quick subset, not the full table" in text
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    for name in QUICK_CLASSES:
        # TP on the device and on CPU, then eager and compiled: every cell a pass.
        cells = [c.strip() for c in rows[name].strip("|").split("|")]
        assert cells[2].startswith("pass") and cells[3].startswith("pass"), rows[name]
        assert cells[6] == "pass" and "0 recompiles" in cells[7], rows[name]
    assert "## Regional vs whole-model compilation" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compat", "diffusers", "--quick"], "--quick writes a partial table: give --output"),
        (["compat", "--arch", "llama", "diffusers"], "--arch given before 'diffusers'"),
        (["compat", "diffusers", "--timeout", "0", "--output", "x.md"], "--timeout must be positive"),
    ],
)
def test_bad_arguments_are_explained(argv, message, capsys):
    assert cli_main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_suite_is_an_error(capsys):
    with pytest.raises(SystemExit) as exited:
        cli_main(["compat", "transformers"])
    assert exited.value.code == 2
    assert "invalid choice: 'transformers' (choose from 'diffusers', 'report')" in capsys.readouterr().err


def test_report_only_needs_results(tmp_path, capsys):
    assert cli_main(["compat", "diffusers", "--report-only", "--output", str(tmp_path / "t.md")]) == 2
    assert "no results directory" in capsys.readouterr().err
