"""What ``version_matrix.py`` and ``upstream_canary.py`` share: the release ranges ``pyproject.toml``
declares, and a virtual environment built once for a set of pinned releases and reused while they
(and the project's declared requirements) are unchanged.

Only ``packaging`` is imported beyond the standard library: the scripts run with any Python that can
build the environments, not only one that has hf_neuron installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The upstream libraries the adapters patch or build on (``hf_neuron.versions.CHECKED``).
LIBRARIES = ("torch", "transformers", "trl", "diffusers", "peft", "accelerate", "datasets", "tokenizers")
#: The test runner, whose behaviour the test suite depends on: pinned with the libraries.
TEST_RUNNER = ("pytest", "pytest-xdist")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def declared_ranges(names: tuple[str, ...] = LIBRARIES + TEST_RUNNER) -> dict:
    """``{distribution: SpecifierSet}`` for ``names``, from pyproject's dependencies and test extra."""
    from packaging.requirements import Requirement

    project = _project()
    ranges = {}
    for line in project["dependencies"] + project["optional-dependencies"]["test"]:
        requirement = Requirement(line)
        if requirement.name in names:
            ranges[requirement.name] = requirement.specifier
    missing = set(names) - set(ranges)
    if missing:
        raise SystemExit(f"pyproject.toml declares no range for {sorted(missing)}")
    return ranges


def lower_bound(name: str, specifier) -> str:
    """The oldest release ``specifier`` admits, as a full version (``>=2.13`` -> ``2.13.0``)."""
    lows = [spec.version for spec in specifier if spec.operator in (">=", "==", "~=")]
    if len(lows) != 1:
        raise SystemExit(f"pyproject.toml: {name}{specifier} needs exactly one lower bound (>=) "
                         "to pin the oldest release")
    return lows[0] + ".0" * max(0, 3 - len(lows[0].split(".")))


def _project_requirements() -> str:
    """What an editable install of the checkout records from pyproject: its requirements and entry points.
    hf_neuron reads its verified ranges from that metadata, so a changed range makes the environment stale."""
    project = _project()
    keys = ("dependencies", "optional-dependencies", "scripts", "entry-points")
    return json.dumps({key: project.get(key) for key in keys}, sort_keys=True)


def environments_dir() -> Path:
    """Where the scripts keep the environments they build: outside the checkout (``$HF_NEURON_CACHE/
    environments``), so that a fresh clone (CI clones one for every run) reuses an environment whose
    pins have not changed instead of installing it again."""
    return Path(os.environ.get("HF_NEURON_CACHE", Path.home() / ".cache" / "hf_neuron")) / "environments"


def _pip_install(python: Path, arguments: list[str], log=None) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *arguments],
                   check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT if log else None)


def ensure_venv(path: Path, pins: dict[str, str], install: list[str], what: str, log=None) -> Path:
    """The Python of the environment at ``path`` where ``pip install *install`` ran under constraints
    pinning ``pins`` exactly; reused as it is while the pins and the project's requirements are unchanged.
    An environment built for another checkout gets this one's editable install (``-e`` in ``install``)
    in place of the other's. pip's output goes to ``log`` (an open file) when given."""
    python = path / "bin" / "python"
    constraints = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    stamp, stamped, checkout = path / "pins.txt", path / "project-requirements.json", path / "checkout.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == constraints and stamped.exists() \
            and stamped.read_text() == _project_requirements():
        if "-e" in install and (not checkout.exists() or checkout.read_text() != str(ROOT)):
            print(f"installing this checkout ({ROOT}) in {path}", flush=True)
            _pip_install(python, ["--no-deps", "-e", str(ROOT)], log)
            checkout.write_text(str(ROOT))
        return python
    print(f"installing {what} in {path}:\n{constraints}", flush=True)
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(path)
    (path / "constraints.txt").write_text(constraints)
    _pip_install(python, [*install, "-c", str(path / "constraints.txt")], log)
    stamp.write_text(constraints)
    stamped.write_text(_project_requirements())
    checkout.write_text(str(ROOT))
    return python


def installed(python: Path, distribution: str) -> str | None:
    """The version of ``distribution`` installed for ``python``, or None."""
    code = ("import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass")
    out = subprocess.run([str(python), "-c", code, distribution], check=True, capture_output=True, text=True,
                         env=isolated_env()).stdout.strip()
    return out or None


def isolated_env() -> dict:
    """The environment the scripts run an environment's Python in: no user site (its packages would
    shadow the pinned ones)."""
    return dict(os.environ, PYTHONNOUSERSITE="1")
