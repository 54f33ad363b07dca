"""The page of ``hf-neuron compat report --html`` in a real headless Chromium, opened from disk:
the search box, the filter and the release selector show exactly the rows they should, and the
browser console stays free of errors.

Needs Chromium, chromedriver and Selenium (``apt-get install chromium chromium-driver``,
``pip install selenium``); without them the tests skip, unless HF_NEURON_REQUIRE_BROWSER=1 (set in
CI), where a missing browser is a failure rather than a silently skipped check.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from hf_neuron.compat import html_report, report
from hf_neuron.compat import results as R

ROOT = Path(__file__).resolve().parents[2]

# The rows the browser draws (a hidden row or a row of a hidden release has no box), in page order.
VISIBLE_ROWS = """
return Array.from(document.querySelectorAll("#architectures tbody tr"))
  .filter(function (row) { return row.getClientRects().length > 0; })
  .map(function (row) { return row.getAttribute("data-model-type"); });
"""


def _screenshot_script():
    """scripts/compat_report_screenshot.py, which knows how to start the browser."""
    spec = importlib.util.spec_from_file_location("compat_report_screenshot",
                                                  ROOT / "scripts" / "compat_report_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def browser():
    script = _screenshot_script()
    why = script.missing_browser()
    if why:
        if os.environ.get("HF_NEURON_REQUIRE_BROWSER") == "1":
            pytest.fail(f"HF_NEURON_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    driver = script.headless_chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    files = report.results_files()
    index = html_report.write_site(tmp_path_factory.mktemp("site"), files=files)
    return index, [R.load(path) for path in files]


@pytest.fixture
def page(browser, site):
    """The page freshly loaded; after the test, the console must hold no error."""
    index, releases = site
    browser.get(index.as_uri())
    yield browser, releases
    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def _reason(rec: dict) -> str:
    """The text the page gives as the reason: the first failure's, else why the architecture did not run."""
    if rec.get("failure"):
        return rec["failure"]["reason"]
    if not rec["levels"]:
        return "not run"
    return rec["skip_reasons"].get("L1", "") if rec["levels"].get("L1") == "skip" else ""


def _matching(results: dict, needle: str) -> list[str]:
    from hf_neuron.transformers.fix_scope import model_fixes

    needle = needle.lower()
    return [r["model_type"] for r in results["architectures"]
            if any(needle in text.lower() for text in
                   [r["model_type"], _reason(r), *(f.name for f in model_fixes(r["model_type"]))])]


def _shown(driver) -> tuple[list[str], str]:
    from selenium.webdriver.common.by import By

    return driver.execute_script(VISIBLE_ROWS), driver.find_element(By.ID, "shown-count").text


def _choose(driver, element_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, element_id)).select_by_value(value)


def test_at_load_the_newest_release_shows_every_architecture(page):
    driver, releases = page
    newest = [r["model_type"] for r in releases[0]["architectures"]]
    assert _shown(driver) == (newest, f"{len(newest)} of {len(newest)} architectures")


def _needle(results: dict, kind: str) -> str | None:
    """A search of each kind the box serves, taken from the data so that it keeps matching as the
    committed results change: a name, the same in capitals, part of a reason, part of a fix name."""
    from hf_neuron.transformers.fix_scope import model_fixes

    if kind in ("name", "case"):
        return "qwen" if kind == "name" else "QWEN"
    if kind == "reason":
        reason = next((_reason(r) for r in results["architectures"] if _reason(r)), None)
        return reason and reason[len(reason) // 2:][:24]
    fixes = next((model_fixes(r["model_type"]) for r in results["architectures"] if model_fixes(r["model_type"])),
                 None)
    return fixes and fixes[0].name[-16:]


@pytest.mark.parametrize("kind", ["name", "case", "reason", "fix"])
def test_search_shows_exactly_the_rows_whose_name_reason_or_fixes_match(page, kind):
    from selenium.webdriver.common.by import By

    driver, releases = page
    needle = _needle(releases[0], kind)
    if not needle:
        pytest.skip(f"no architecture of the newest release has a {kind} to search for")
    driver.find_element(By.ID, "search").send_keys(needle)
    expected = _matching(releases[0], needle)
    assert expected, needle
    assert _shown(driver) == (expected, f"{len(expected)} of {len(releases[0]['architectures'])} architectures")


def test_the_failed_filter_and_a_release_switch(page):
    driver, releases = page
    _choose(driver, "filter", "failed")
    failing = [r["model_type"] for r in releases[0]["architectures"] if R.has_failure(r)]
    assert _shown(driver) == (failing, f"{len(failing)} of {len(releases[0]['architectures'])} architectures")

    # The oldest release, its filter kept: its own failing architectures, and its provenance line.
    oldest = len(releases) - 1
    _choose(driver, "release", str(oldest))
    failing = [r["model_type"] for r in releases[oldest]["architectures"] if R.has_failure(r)]
    total = len(releases[oldest]["architectures"])
    assert _shown(driver) == (failing, f"{len(failing)} of {total} architectures")
    assert driver.execute_script(
        "return Array.from(document.querySelectorAll('.release-info'))"
        ".filter(function (p) { return !p.hidden; }).map(function (p) { return p.dataset.releaseInfo; })"
    ) == [str(oldest)]

    _choose(driver, "filter", "all")
    assert _shown(driver)[1] == f"{total} of {total} architectures"
