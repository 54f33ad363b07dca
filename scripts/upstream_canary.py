"""The next upstream release in minutes: do hf_neuron's fixes and promises hold on a release beyond its caps?

Every range in ``pyproject.toml`` stops before the next release nobody has tested. This command asks the
package index for the newest release of each checked library (transformers, trl, diffusers, peft,
accelerate, datasets, tokenizers) and, for each release beyond its cap, builds a scratch environment of
the newest *verified* releases (the top of every declared range, torch 2.14.1 + torchvision 0.29.1) with
that one library at its new release. There it runs ``HF_NEURON_SIMULATOR=1 hf-neuron env --check`` and
the promise tests of ``scripts/version_matrix.py``, and prints one row per library: the declared range,
the new release, the fixes ``env --check`` reports UNKNOWN, the promise tests that fail, and a verdict.
It is a command to run by hand, not part of CI's pass/fail (CI proves the declared ranges).

Before raising a cap:

  1. ``python scripts/upstream_canary.py --list`` (``--pre`` for pre-releases): what is beyond the caps.
  2. ``python scripts/upstream_canary.py``: read the table. A fix UNKNOWN means its detector no longer
     recognises the upstream code it patches; a failing promise test means a fix or a documented figure no
     longer holds; "blocked" means pip cannot install the release beside the other verified releases
     (the row names the requirement in the way: try ``--together``, or wait for that library).
  3. Fix what it names; rerun only that release with ``--library NAME==VERSION`` until its verdict is
     "raise the cap to NAME<X>" (X: the next minor release after it, untested as the caps always are).
  4. Raise the cap in ``pyproject.toml`` as the verdict says, then run ``python scripts/version_matrix.py``
     and CI (``bash .ci/run``): they test both ends of the new range with every test.

    python scripts/upstream_canary.py --list [--pre]         # what is beyond the caps; builds nothing
    python scripts/upstream_canary.py [--pre] [--together]   # each new release (and all of them together)
    python scripts/upstream_canary.py --library tokenizers==1.0.0rc3 -- -k padding   # one release, some tests

torch is never raised here: new torch releases are not on this machine's disk (any other torch spec
downloads a multi-GB build), and TorchNeuron pins torch (torch-neuronx 2.13.3 for torch 2.13, 2.14.3 for
torch 2.14), so torch's range follows TorchNeuron's releases, not upstream's.

The environments: ``out/venv-newest`` holds the newest verified releases and hf_neuron (editable), built
once (about 3 minutes with pip's cache; the simulator's C++ extension compiles on its first use there)
and reused while its pins and the project's requirements are unchanged. Each new release gets a thin
environment in ``out/canary/<library>-<version>``: a virtual environment without packages of its own
whose ``.pth`` file adds the base's site-packages after its own, so pip installs only the new release
(and what it needs that the base lacks) into it, and the base stays as it is: 2 to 13 s measured, where
a full environment per release costs the base's 3 minutes, 5.5 GB and its own extension build. Its copy of
hf_neuron's metadata declares the range widened to the new release, as if the cap were raised: no
out-of-range warning hides a real problem, and ``env --check`` answers what it would after the raise.
Logs of every step are in ``out/canary/logs``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from _environments import LIBRARIES, ROOT, TEST_RUNNER, declared_ranges, ensure_venv, isolated_env
from version_matrix import NEWEST_ONLY, promise_tests_command

#: The libraries whose next release the canary tries (torch is never raised: see the module docstring).
CANDIDATES = tuple(name for name in LIBRARIES if name != "torch")
#: The newest torch the declared range admits that this machine has on disk, and its torchvision: CI's
#: newest environment. Exact pins: any other torch spec would download a multi-GB build.
NEWEST_TORCH = {"torch": "2.14.1", "torchvision": "0.29.1"}
BASE = ROOT / "out" / "venv-newest"
SCRATCH = ROOT / "out" / "canary"
FIRST_FAILURES = 3  # failing test ids shown per row
TORCH_NOTE = ("torch: never raised here (new torch releases are not on this machine's disk, and TorchNeuron "
              "pins torch: torch-neuronx 2.13.3 for torch 2.13, 2.14.3 for torch 2.14); every environment has "
              f"torch {NEWEST_TORCH['torch']} + torchvision {NEWEST_TORCH['torchvision']}")


@dataclass
class Library:
    name: str
    declared: object  # packaging SpecifierSet
    verified: object  # packaging Version: the newest release on the index inside the declared range
    newest: object  # packaging Version: the newest release on the index (pre-releases with --pre)

    @property
    def beyond(self) -> bool:
        return not self.declared.contains(self.newest, prereleases=True) and self.newest > self.verified


@dataclass
class Row:
    """One environment's results: a new release (or several, together) on top of the verified ones."""

    label: str
    releases: dict[str, str]
    declared: str
    blocked: str = ""  # pip's reason when it cannot install the releases beside the verified ones
    pip_notes: list[str] = field(default_factory=list)
    check: str = "not run"
    check_passed: bool = False
    tests: str = "not run"
    tests_passed: bool = False
    failing: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.blocked and self.check_passed and self.tests_passed


def progress(message: str) -> None:
    print(message, flush=True)


# -- what the index has --------------------------------------------------------------------------------


def index_versions(name: str, pre: bool) -> list:
    """Every release of ``name`` on the package index, newest first (``pip index versions``)."""
    from packaging.version import Version

    command = [sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check",
               *(["--pre"] if pre else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            return sorted((Version(v) for v in line.partition(":")[2].split(",")), reverse=True)
    raise SystemExit(f"the package index did not answer for {name} (`{' '.join(command[1:])}` exited with "
                     f"{done.returncode}):\n{done.stderr.strip()[-2000:]}")


def survey(pre: bool) -> dict[str, Library]:
    """The declared range, the newest verified release and the newest release of each candidate library
    and of the test runner (whose newest verified release the environments pin too)."""
    ranges = declared_ranges(CANDIDATES + TEST_RUNNER)
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = dict(zip(ranges, pool.map(lambda name: index_versions(name, pre), ranges)))
    libraries = {}
    for name, declared in ranges.items():
        inside = [v for v in found[name] if not v.is_prerelease and declared.contains(v)]
        if not inside:
            raise SystemExit(f"the package index has no release of {name} in its declared range {declared}")
        libraries[name] = Library(name, declared, inside[0], found[name][0])
    return libraries


def verified_pins(libraries: dict[str, Library]) -> dict[str, str]:
    torch_range = declared_ranges(("torch",))["torch"]
    if not torch_range.contains(NEWEST_TORCH["torch"]):
        raise SystemExit(f"pyproject.toml's torch range {torch_range} no longer admits torch {NEWEST_TORCH['torch']}: "
                         "update NEWEST_TORCH in scripts/upstream_canary.py to a torch this machine has on disk")
    return {**{name: str(library.verified) for name, library in libraries.items()}, **NEWEST_TORCH}


def next_cap(release: str) -> str:
    """The cap that admits ``release`` and stops before the next untested minor release (5.26.0 -> 5.27)."""
    from packaging.version import Version

    version = Version(release)
    return f"{version.major}.{version.minor + 1}"


# -- the environments ----------------------------------------------------------------------------------


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def widened(declared, release: str) -> str:
    """``declared`` with the bound that excludes ``release`` moved to admit it: a cap raised to the next
    minor release after it, a lower bound lowered to it."""
    specs = []
    for spec in declared:
        if spec.contains(release, prereleases=True):
            specs.append(str(spec))
        elif spec.operator == "<":
            specs.append(f"<{next_cap(release)}")
        elif spec.operator == ">=":
            specs.append(f">={release}")
        else:
            specs.append(str(spec))
    return ",".join(specs)


def write_widened_metadata(env: Path, releases: dict[str, str]) -> None:
    """A copy of the base's hf_neuron metadata in ``env`` (found first on its path) whose declared ranges
    admit ``releases``: hf_neuron then reads the ranges it would have once the caps are raised."""
    from packaging.requirements import Requirement

    (dist_info,) = site_packages(BASE).glob("hf_neuron-*.dist-info")
    target = site_packages(env) / dist_info.name
    shutil.copytree(dist_info, target)
    lines = []
    for line in (target / "METADATA").read_text().splitlines(keepends=True):
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.partition(":")[2].strip())
            name = requirement.name
            if name in releases and requirement.marker is None:
                line = f"Requires-Dist: {name}{widened(requirement.specifier, releases[name])}\n"
        lines.append(line)
    (target / "METADATA").write_text("".join(lines))


def link_base_scripts(env: Path) -> None:
    """The base's console scripts (``hf-neuron``, ``torchrun``, ``pytest``) started by ``env``'s Python."""
    base_python = f"#!{BASE / 'bin' / 'python'}\n".encode()
    for script in (BASE / "bin").iterdir():
        target = env / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        content = script.read_bytes()
        if content.startswith(base_python):
            target.write_bytes(f"#!{env / 'bin' / 'python'}\n".encode() + content[len(base_python):])
            target.chmod(0o755)


def conflict(pip_output: str) -> str:
    """pip's reason for ResolutionImpossible, shortened to the requirements in conflict."""
    lines = pip_output.splitlines()
    if "The conflict is caused by:" in lines:
        start = lines.index("The conflict is caused by:") + 1
        causes = []
        for line in lines[start:]:
            if not line.startswith("    "):
                break
            if not line.strip().startswith("The user requested"):
                causes.append(line.strip())
        if causes:
            return "; ".join(causes)
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    return errors[-1] if errors else "pip failed (see its log)"


def incompatibilities(pip_output: str) -> list[str]:
    """pip's 'X requires Y, but you have Z' lines: installed, but something installed disagrees (hf-neuron's
    own ranges aside: the environment's copy of its metadata admits the new releases)."""
    return [line.strip() for line in pip_output.splitlines()
            if "which is incompatible" in line and not line.startswith("hf-neuron ")]


def ensure_child(row: Row, pins: dict[str, str], log) -> Path | None:
    """The thin environment of ``row.releases`` on top of the base; None when pip cannot install them
    beside the verified releases (``row.blocked`` says why)."""
    path = SCRATCH / row.label
    python = path / "bin" / "python"
    stamp_text = json.dumps({"base": pins, "base-requirements": (BASE / "project-requirements.json").read_text(),
                             "releases": row.releases}, sort_keys=True)
    stamp = path / "installed.json"
    if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        log.write(f"{path} is up to date\n")
        row.pip_notes = json.loads((path / "pip-notes.json").read_text())
        return python
    shutil.rmtree(path, ignore_errors=True)
    venv.EnvBuilder(with_pip=False).create(path)
    (site_packages(path) / "_canary_base.pth").write_text(
        f"import site; site.addsitedir({str(site_packages(BASE))!r})\n")
    link_base_scripts(path)
    held = {name: version for name, version in pins.items() if name not in row.releases}
    (path / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(held.items())))
    # The held releases are requested too (pip finds them installed in the base): pip then checks their
    # requirements against the new release instead of installing it beside a library that excludes it.
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
               *[f"{n}=={v}" for n, v in row.releases.items()], *[f"{n}=={v}" for n, v in sorted(held.items())],
               "-c", str(path / "constraints.txt")]
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, capture_output=True, text=True, cwd=path, env=isolated_env())
    log.write(done.stdout + done.stderr)
    if done.returncode != 0:
        row.blocked = conflict(done.stdout + done.stderr)
        shutil.rmtree(path)
        return None
    row.pip_notes = incompatibilities(done.stdout + done.stderr)
    write_widened_metadata(path, row.releases)
    (path / "pip-notes.json").write_text(json.dumps(row.pip_notes))
    stamp.write_text(stamp_text)
    return python


# -- the checks ----------------------------------------------------------------------------------------


def env_check(row: Row, python: Path, log, timeout: float) -> None:
    """``HF_NEURON_SIMULATOR=1 hf-neuron env --check`` (its JSON report) in the environment of ``python``."""
    command = [str(python.parent / "hf-neuron"), "env", "--check", "--json"]
    log.write(f"$ HF_NEURON_SIMULATOR=1 {' '.join(command)}\n")
    log.flush()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**isolated_env(), "HF_NEURON_SIMULATOR": "1"})
    except subprocess.TimeoutExpired:
        row.check = f"FAIL: killed after {timeout:.0f} s"
        return
    log.write(done.stdout + done.stderr)
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        lines = done.stderr.strip().splitlines()
        row.check = f"FAIL (exit {done.returncode}): {lines[-1] if lines else 'no output'}"
        return
    unknown = [f["name"] for f in info["fixes"] if f["status"] == "unknown"]
    found = [f"UNKNOWN {', '.join(unknown)}"] if unknown else []
    found += [f"{name} {info['versions'][name]} outside {info['verified_ranges'][name]}" for name in info["unverified"]]
    found += info.get("errors", [])
    row.check_passed = done.returncode == 0 and not found
    row.check = "pass" if row.check_passed else f"FAIL: {'; '.join(found) or f'exit {done.returncode}'}"


SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b")


def promise_tests(row: Row, python: Path, pytest_args: list[str], newest_only: bool, log, timeout: float) -> None:
    command = promise_tests_command(python, pytest_args, newest_only=newest_only)
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT,
                              env=isolated_env())
    except subprocess.TimeoutExpired:
        row.tests = f"killed after {timeout:.0f} s"
        return
    log.flush()
    output = Path(log.name).read_text(errors="replace").splitlines()
    summary = next((line for line in reversed(output)
                    if SUMMARY_COUNT.search(line) and re.search(r" in [\d.]+s", line)), "")
    counts = {("error" if word.startswith("error") else word): int(n) for n, word in SUMMARY_COUNT.findall(summary)}
    row.failing = [line.split(" ", 1)[1].split(" - ", 1)[0] for line in output
                   if line.startswith(("FAILED ", "ERROR "))]
    row.tests_passed = done.returncode == 0
    shown = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped") if counts.get(k))
    row.tests = shown or f"no test ran (pytest exited with {done.returncode})"
    if row.failing:
        more = f" (+{len(row.failing) - FIRST_FAILURES} more)" if len(row.failing) > FIRST_FAILURES else ""
        row.tests += f": {', '.join(row.failing[:FIRST_FAILURES])}{more}"


# -- the report ----------------------------------------------------------------------------------------


def verdict(row: Row, libraries: dict[str, Library], subset: bool) -> str:
    from packaging.version import Version

    if row.blocked:
        tried = " and ".join(f"{name} {release}" for name, release in row.releases.items())
        return f"blocked: {row.blocked}; wait for a release of that library that admits {tried} (then --together)"
    if not row.passed:
        again = " ".join(f"--library {name}=={release}" for name, release in row.releases.items())
        return f"fix what fails (logs: out/canary/logs/{row.label}-*.log), then rerun with {again}"
    changes = []
    for name, release in row.releases.items():
        declared = libraries[name].declared
        if not declared.contains(release, prereleases=True):
            above = Version(release) > libraries[name].verified
            changes.append(f"raise the cap to {name}<{next_cap(release)}" if above else
                           f"lower the bound to {name}>={release}")
    pre = [f"{name} {release}" for name, release in row.releases.items() if Version(release).is_prerelease]
    text = "; ".join(changes) if changes else "passes (already inside the declared range)"
    if pre:
        text += f" once {' and '.join(pre)} is released as final and passes here"
    if subset:
        text += "; on the selected tests only: rerun without pytest arguments before changing pyproject.toml"
    return text


def table(rows: list[Row], libraries: dict[str, Library], subset: bool) -> str:
    header = ("library", "declared", "new release", "env --check", "promise tests", "verdict")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        release = ", ".join(f"{n} {v}" for n, v in row.releases.items()) if len(row.releases) > 1 else \
            next(iter(row.releases.values()))
        check = "not run (blocked)" if row.blocked else row.check
        tests = "not run (blocked)" if row.blocked else row.tests
        cells = ("together" if len(row.releases) > 1 else next(iter(row.releases)), row.declared, release, check, tests,
                 verdict(row, libraries, subset))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"{row.label}: pip installed it although {note}" for row in rows for note in row.pip_notes]
    return "\n".join(lines + [""] * bool(notes) + notes)


def list_releases(libraries: dict[str, Library], pre: bool) -> str:
    newest = f"newest on the index{' (pre-releases too)' * pre}"
    lines = [f"{'library':13s} {'declared':18s} {'newest verified':16s} {newest}"]
    for library in libraries.values():
        mark = "  BEYOND THE CAP" if library.beyond else ""
        lines.append(f"{library.name:13s} {str(library.declared):18s} {str(library.verified):16s} "
                     f"{library.newest}{mark}")
    return "\n".join(lines + [TORCH_NOTE])


def parse_library(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("==")
    name = name.strip().lower()
    if name == "torch":
        raise argparse.ArgumentTypeError(TORCH_NOTE)
    if not sep or name not in CANDIDATES or not version.strip():
        raise argparse.ArgumentTypeError(f"expected NAME==VERSION with NAME one of {', '.join(CANDIDATES)}")
    return name, version.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print what is beyond the caps, build and run nothing")
    parser.add_argument("--pre", action="store_true", help="count pre-releases as new releases")
    parser.add_argument("--library", action="append", type=parse_library, default=[], metavar="NAME==VERSION",
                        help="try this release instead of the newest beyond the cap (repeatable); only these are tried")
    parser.add_argument("--together", action="store_true",
                        help="also try all the new releases in one environment (releases that need each other)")
    parser.add_argument("--with-newest-only", action="store_true",
                        help="also run version_matrix.NEWEST_ONLY (the costliest multi-process variants)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                        help="seconds for each step (default: %(default)s)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), e.g. -- -k padding")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    progress(f"[index] asking the package index for the newest release of {', '.join(CANDIDATES + TEST_RUNNER)}"
             f"{' (pre-releases too)' if args.pre else ''} ...")
    libraries = survey(args.pre)
    progress(f"[index] done in {time.perf_counter() - started:.0f} s")
    print(list_releases(libraries, args.pre), flush=True)
    if args.library:
        candidates = dict(args.library)
    else:
        candidates = {name: str(libraries[name].newest) for name in CANDIDATES if libraries[name].beyond}
    if args.list:
        return 0
    if not candidates:
        print("nothing is beyond the caps: nothing to try"
              f"{'' if args.pre else ' (--pre also counts pre-releases)'}")
        return 0

    rows = [Row(f"{name}-{release}", {name: release}, str(libraries[name].declared))
            for name, release in candidates.items()]
    if args.together and len(candidates) > 1:
        rows.append(Row("together-" + "-".join(f"{n}-{v}" for n, v in candidates.items()), dict(candidates),
                        "; ".join(f"{n}{libraries[n].declared}" for n in candidates)))
    pins = verified_pins(libraries)
    logs = SCRATCH / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    steps = 1 + 3 * len(rows)
    step = 0

    def begin(title: str) -> float:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {title} ...")
        return time.perf_counter()

    def end(since: float, result: str, log: Path) -> None:
        progress(f"[{step}/{steps}] {time.perf_counter() - since:.0f} s: {result}  (log: {log.relative_to(ROOT)})")

    since = begin(f"the newest verified releases in {BASE.relative_to(ROOT)} (built once, about 3 minutes)")
    log_path = logs / "base.log"
    with open(log_path, "w") as log:
        try:
            ensure_venv(BASE, pins, [f"{n}=={v}" for n, v in NEWEST_TORCH.items()] + ["-e", f"{ROOT}[test]"],
                        "the newest verified releases", log=log)
        except subprocess.CalledProcessError as exc:
            end(since, f"FAIL: pip exited with {exc.returncode}", log_path)
            return 1
    end(since, ", ".join(f"{n} {v}" for n, v in sorted(pins.items())), log_path)

    for row in rows:
        since = begin(f"{row.label}: a thin environment on the base")
        log_path = logs / f"{row.label}-install.log"
        with open(log_path, "w") as log:
            python = ensure_child(row, pins, log)
        end(since, f"blocked: {row.blocked}" if row.blocked else f"{SCRATCH.relative_to(ROOT)}/{row.label}", log_path)
        if python is None:
            progress(f"[{step + 1}-{step + 2}/{steps}] {row.label}: env --check and the promise tests not run "
                     "(blocked)")
            step += 2
            continue
        since = begin(f"{row.label}: HF_NEURON_SIMULATOR=1 hf-neuron env --check")
        log_path = logs / f"{row.label}-env-check.log"
        with open(log_path, "w") as log:
            env_check(row, python, log, args.timeout)
        end(since, row.check, log_path)
        since = begin(f"{row.label}: the promise tests{' ' + ' '.join(args.pytest_args) if args.pytest_args else ''}")
        log_path = logs / f"{row.label}-tests.log"
        with open(log_path, "w") as log:
            promise_tests(row, python, args.pytest_args, args.with_newest_only, log, args.timeout)
        end(since, row.tests, log_path)

    print(f"\n{table(rows, libraries, bool(args.pytest_args))}")
    deselected = "" if args.with_newest_only else \
        f"; {len(NEWEST_ONLY)} NEWEST_ONLY tests deselected (--with-newest-only runs them)"
    print(f"\n{TORCH_NOTE}\ntotal {time.perf_counter() - started:.0f} s{deselected}")
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
