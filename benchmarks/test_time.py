"""Where the test suite's time goes: README command 2 run once, with every process's time accounted.

    python benchmarks/test_time.py                       # the whole suite (pytest -q -n auto)
    python benchmarks/test_time.py -- tests/trl -n 0     # any pytest arguments after --
    python benchmarks/test_time.py --report out/test-time.json   # print a saved run again

Every Python process the run starts (pytest, its workers, the subprocesses and torchrun ranks the tests
start) loads ``benchmarks/_test_time_hook.py`` as ``sitecustomize`` and records its CPU time and the
seconds it spent importing the large libraries, in Dynamo, in the graph compiler, loading models,
building tiny models and generating on CPU, each attributed to the test that was running. The report
prints, from this one run:

- the wall time of the run and the CPU time of all its processes (on a saturated machine, wall is
  about CPU divided by the cores: CPU is what a change must remove);
- the CPU time by kind of process (pytest workers, torchrun launchers and ranks, other subprocesses) and
  the time by activity;
- per test: its CPU time in pytest's process plus the CPU time of every process it started (wall time
  would count a test waiting for its subprocesses twice);
- the test files and tests that cost the most, each with its processes and its split;
- the fixed costs measured beside the run: one process importing the libraries, and one 2-rank torchrun
  doing one all-reduce.

The analysis is written to ``--output`` (JSON) for ``--report``. The hook's wrappers are visible to
tests that compare an attribute with upstream's own (``test_a_plain_process_gets_upstream_behaviour``
fails under it); the figures are what matters here, README command 2 is the verdict.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOOK = Path(__file__).with_name("_test_time_hook.py")
ACTIVITY_NAMES = {
    "imports": "importing torch/transformers/trl/diffusers/...",
    "dynamo": "Dynamo tracing",
    "backend": "graph compilation (simulated compiler, AOTAutograd)",
    "loading": "from_pretrained",
    "tiny": "building tiny models",
    "cpu_generate": "generate on CPU (reference runs)",
    "in_process": "tests in pytest's processes (wall, waiting for subprocesses included)",
    "in_process_cpu": "tests in pytest's processes (CPU)",
}
ACTIVITIES = tuple(ACTIVITY_NAMES)
IMPORT_CODE = "import torch, transformers, trl, diffusers"
ALL_REDUCE_CODE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo"); t = torch.ones(1); dist.all_reduce(t); dist.destroy_process_group()
"""


def _fixed_costs(env: dict) -> dict:
    """Seconds of one process importing the libraries (``import_time.py``'s measurement), and of a 2-rank
    torchrun doing one all-reduce."""
    from import_time import time_import

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "all_reduce.py"
        script.write_text(ALL_REDUCE_CODE)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
                       env=env, check=True, capture_output=True)
        all_reduce = time.perf_counter() - start
    return {f"one process: {IMPORT_CODE}": round(time_import(IMPORT_CODE.removeprefix("import "), disable=False), 2),
            "torchrun x2: start, one all-reduce, exit": round(all_reduce, 2)}


def _read_records(log_dir: Path) -> list[dict]:
    """One dict per process: its start record updated by its exit record (no ``cpu`` if it was killed)."""
    processes = []
    for path in log_dir.glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        if records and records[0]["event"] == "start":
            processes.append({key: value for record in records for key, value in record.items()})
    return processes


def _test_id(pytest_current_test: str) -> str:
    """``tests/x.py::test_y[z] (call)`` -> ``tests/x.py::test_y[z]``."""
    return pytest_current_test.rsplit(" (", 1)[0] if pytest_current_test else ""


def analyse(processes: list[dict], wall: float, fixed: dict) -> dict:
    by_role = collections.Counter()
    counts = collections.Counter()
    activities = collections.Counter()
    tests: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for proc in processes:
        role, cpu = proc["role"], proc.get("cpu") or 0.0
        by_role[role] += cpu
        counts[role] += 1
        owner = _test_id(proc.get("test", ""))
        for activity, per_test in (proc.get("times") or {}).items():
            for test, seconds in per_test.items():
                activities[activity] += seconds
                tests[_test_id(test) or owner][activity] += seconds
        if role != "pytest":  # a process a test started: all of its CPU is that test's
            tests[owner][f"cpu: {role}"] += cpu
            tests[owner]["processes"] += 1
    for test, split in tests.items():
        split["total"] = split["in_process_cpu"] + sum(v for k, v in split.items() if k.startswith("cpu: "))
    files = collections.Counter()
    for test, split in tests.items():
        files[test.split("::")[0]] += split["total"]
    return {
        "wall": round(wall, 1),
        "cpu": round(sum(by_role.values()), 1),
        "cpu_by_process_kind": {k: round(v, 1) for k, v in by_role.most_common()},
        "processes_by_kind": dict(counts),
        "activities": {k: round(activities[k], 1) for k in ACTIVITIES},
        "fixed_costs": fixed,
        "files": {k: round(v, 1) for k, v in files.most_common()},
        "tests": {k: {a: round(b, 1) for a, b in v.items()} for k, v in
                  sorted(tests.items(), key=lambda item: -item[1]["total"])},
    }


def report(analysis: dict, top: int) -> str:
    minutes = lambda s: f"{s / 60:6.1f} min"  # noqa: E731
    lines = [f"wall {minutes(analysis['wall'])}, CPU of every process {minutes(analysis['cpu'])} "
             f"({analysis['cpu'] / max(analysis['wall'], 1e-9):.2f} cores busy on average)", "", "CPU by kind of process:"]
    for kind, cpu in analysis["cpu_by_process_kind"].items():
        lines.append(f"  {kind:<20} {minutes(cpu)}  ({analysis['processes_by_kind'].get(kind, 0)} processes)")
    lines += ["", "time inside each activity (all processes, wall seconds of the process):"]
    for activity, seconds in analysis["activities"].items():
        lines.append(f"  {ACTIVITY_NAMES[activity]:<55} {minutes(seconds)}")
    lines += ["", "fixed costs measured beside the run:"]
    lines += [f"  {name}: {seconds:.1f} s" for name, seconds in analysis["fixed_costs"].items()]
    lines += ["", f"costliest {top} files (CPU: in pytest's process and in every process their tests started):"]
    lines += [f"  {minutes(cpu)}  {name}" for name, cpu in list(analysis["files"].items())[:top]]
    lines += ["", f"costliest {top} tests (CPU: in pytest's process and in every process they started):"]
    for test, split in list(analysis["tests"].items())[:top]:
        parts = ", ".join(f"{k} {v:.0f}s" for k, v in split.items() if k not in ("total", "processes") and v >= 1)
        lines.append(f"  {split['total']:6.0f} s  {int(split.get('processes', 0)):3d} proc  {test}\n           {parts}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "test-time.json")
    parser.add_argument("--report", type=Path, help="print the analysis saved in this file, run nothing")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments (after --; default: -q -n auto)")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text()), args.top))
        return 0
    work = Path(tempfile.mkdtemp(prefix="hf_neuron-test-time-"))
    hook_dir, log_dir = work / "hook", work / "log"
    hook_dir.mkdir()
    log_dir.mkdir()
    shutil.copy(HOOK, hook_dir / "sitecustomize.py")
    env = {**os.environ, "HF_NEURON_TEST_TIME_DIR": str(log_dir), "PYTEST_PLUGINS": "sitecustomize",
           "PYTHONPATH": os.pathsep.join(p for p in (str(hook_dir), os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    status = subprocess.run([sys.executable, "-m", "pytest", *(args.pytest_args or ["-q", "-n", "auto"]), "-W", "ignore::pytest.PytestAssertRewriteWarning"], cwd=ROOT,
                            env=env).returncode
    wall = time.perf_counter() - start
    clean_env = {k: v for k, v in env.items() if k != "HF_NEURON_TEST_TIME_DIR"}
    analysis = {"pytest_status": status, **analyse(_read_records(log_dir), wall, _fixed_costs(clean_env))}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(analysis, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(report(analysis, args.top))
    print(f"\nwritten to {args.output}; pytest exited with {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
