"""Installed from a wheel (no source checkout), the compat commands write into the current folder.

``hf_neuron.compat.paths.source_checkout`` is the one answer to "is this a checkout"; here it is made to
say no, as it does in a wheel install, and every command must then keep its results where the user
works and leave the published pages alone (they do not exist there).
"""

import importlib.util
from pathlib import Path

import pytest

from hf_neuron.compat import paths, report
from hf_neuron.compat.diffusers import run as diffusers_run
from hf_neuron.compat.runner import default_output

from compat_helpers import records, run_compat


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """A wheel install seen from an empty working folder; regenerating a README fails the test."""
    monkeypatch.setattr(paths, "source_checkout", lambda: None)

    def no_readme(*args, **kwargs):
        raise AssertionError(f"a README was regenerated outside a checkout: {args}")

    monkeypatch.setattr(report, "update_readme", no_readme)
    monkeypatch.setattr(report, "update_headline", no_readme)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_compat_writes_its_results_into_the_current_folder(test_archs, installed, capsys):
    assert run_compat("--arch", "_test_pass_a", "--levels", "L1") == 0
    written = sorted(p.name for p in installed.iterdir())
    assert written == [default_output("cpu").name] and written[0].endswith("-cpu.json")
    assert records(installed / written[0])["_test_pass_a"]["levels"]["L1"] == "pass"
    out = capsys.readouterr().out
    assert f"results: {installed / written[0]}" in out
    assert "no README regenerated: not a source checkout" in out


def test_report_only_asks_for_a_readme(installed, capsys):
    assert run_compat("--report-only") == 2
    assert "not a source checkout" in capsys.readouterr().err and not any(installed.iterdir())


def test_diffusers_table_and_results_default_to_the_current_folder(installed):
    output = diffusers_run.default_output()
    assert output == installed / "diffusers.md"
    assert diffusers_run.default_results_dir(output) == installed / "diffusers-results"


def test_every_diffusers_step_is_a_module_of_the_package():
    # A wheel install has no benchmarks/ folder: every step must run from the installed package.
    for step in diffusers_run.plan_steps(quick=True):
        assert importlib.util.find_spec(step.module) is not None, step.module
        assert not any(str(arg).endswith(".py") for arg in step.command(Path("results"))), step


def test_in_a_checkout_the_defaults_are_the_committed_files():
    if paths.source_checkout() is None:
        pytest.skip("hf_neuron is not running from a source checkout")
    assert default_output("cpu").parent == paths.COMMITTED_RESULTS_DIR
    assert diffusers_run.default_output() == paths.compatibility_dir() / "diffusers.md"
    assert diffusers_run.default_results_dir(diffusers_run.default_output()) == paths.COMMITTED_DIFFUSERS_RESULTS_DIR
    # the committed tables the reports and the reproduce test read ship in the package
    assert report.results_files() and all(p.parent == paths.COMMITTED_RESULTS_DIR for p in report.results_files())
