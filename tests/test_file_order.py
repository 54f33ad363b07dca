"""Under ``pytest -n auto`` the test files go to the workers longest first, by the durations recorded in
``tests/test_durations.json`` (``tests/conftest.py``): a long file started last would run alone at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def suite(pytestconfig):
    """The suite's conftest module (every conftest is a module named "conftest": imported by name, another
    folder's could answer)."""
    return pytestconfig.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_go_longest_first_and_unrecorded_files_before_them(suite):
    items = _items("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1")
    durations = {"a.py::t1": 1.0, "a.py::t2": 2.0, "b.py::t1": 10.0, "c.py::t1": 4.0, "c.py::t2": 0.5}
    ordered = [item.nodeid for item in suite.order_files_longest_first(items, durations)]
    assert ordered == ["d.py::t1", "b.py::t1", "c.py::t1", "c.py::t2", "a.py::t1", "a.py::t2"]


def test_a_file_costs_what_its_selected_tests_recorded(suite):
    # -m distributed selects part of a file: only that part's time counts
    durations = {"a.py::slow": 100.0, "a.py::fast": 1.0, "b.py::t": 5.0}
    ordered = [item.nodeid for item in suite.order_files_longest_first(_items("a.py::fast", "b.py::t"), durations)]
    assert ordered == ["b.py::t", "a.py::fast"]


def test_a_run_records_its_tests_and_keeps_the_others_of_existing_files(tmp_path):
    record = tmp_path / "durations.json"
    kept, gone = "tests/test_cli.py::t", "tests/a_file_that_moved.py::t"
    record.write_text(json.dumps({kept: 3.0, gone: 2.0}))
    test = "tests/test_file_order.py::test_files_go_longest_first_and_unrecorded_files_before_them"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                             f"--record-durations={record}", test], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    recorded = json.loads(record.read_text())
    assert set(recorded) == {kept, test} and recorded[kept] == 3.0


def test_the_record_names_only_existing_files(suite):
    recorded = json.loads(suite.TEST_DURATIONS.read_text())
    assert recorded and all(isinstance(s, (int, float)) and s >= 0 for s in recorded.values())
    missing = sorted({suite._file(nodeid) for nodeid in recorded} - {p.relative_to(ROOT).as_posix()
                                                                      for p in ROOT.glob("tests/**/test_*.py")})
    assert not missing, f"{missing} moved or went: record the durations again (python -m pytest -n auto --record-durations)"
