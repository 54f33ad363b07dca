"""The wheel holds every file hf_neuron reads at run time: a wheel install has no checkout to fall back on.

The expected files are read from the source tree, so a data file added later and forgotten in
``[tool.setuptools.package-data]`` fails here. ``scripts/wheel_check.py`` goes further: it installs the
wheel in a fresh environment and runs the commands from an empty folder (minutes, not part of the suite).
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_neuron"
# Folders of files that are read, not imported: the simulator's C++ sources (the extension and the
# process-group backend, compiled on first use), the compat harness's ranked list and committed results.
DATA_FOLDERS = (*sorted((PACKAGE / "simulator").glob("csrc*")), PACKAGE / "compat" / "data")


def _build_wheel(dest: Path) -> Path:
    spec = importlib.util.spec_from_file_location("wheel_check", ROOT / "scripts" / "wheel_check.py")
    wheel_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheel_check)
    return wheel_check.build_wheel(dest)


def _source_files(folder: Path, pattern: str = "*") -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in folder.rglob(pattern)
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_wheel_holds_every_module_and_data_file(tmp_path):
    with zipfile.ZipFile(_build_wheel(tmp_path)) as wheel:
        names = set(wheel.namelist())
    data = set().union(*(_source_files(folder) for folder in DATA_FOLDERS))
    assert {"hf_neuron/simulator/csrc_c10d/backend.cpp", "hf_neuron/simulator/csrc/runtime.cpp",
            "hf_neuron/compat/data/top100-text-generation.tsv"} <= data  # the folders are where they were
    assert any(name.startswith("hf_neuron/compat/data/results/diffusers/") for name in data)
    assert sorted(data - names) == [], "data files missing from the wheel: add them to package-data in pyproject.toml"
    assert sorted(_source_files(PACKAGE, "*.py") - names) == []
