"""``hf-neuron compat diffusers``: every diffusers check in one command, then the table.

The table (``compatibility/diffusers.md`` in a checkout) needs five recorded runs: the
tensor-parallel check under torchrun on the neuron device and again on CPU with gloo (the proof for
classes the device cannot run yet), the regional-compilation check, the tiny pipelines and the
compile benchmark. Each runs in its own process (a torchrun job for TP, so that both ranks start
from a clean interpreter, as a user's job does), writes its results file, and a failing class is a
finding recorded in that file, not a failed step. A step fails when it writes no results (crash,
timeout); then the table is left as it was. Without a Trainium device the neuron steps run on the simulator.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hf_neuron.compat import paths
from hf_neuron.compat.diffusers.table import RESULT_FILES

TP_RANKS = 2
# --quick: classes covering upstream's and hf_neuron's _repeated_blocks and TP plans, one and two
# block kinds; an image and a video pipeline; one class for the benchmark.
QUICK_CLASSES = ("ChromaTransformer2DModel", "CogView4Transformer2DModel", "AuraFlowTransformer2DModel")
QUICK_FAMILIES = ("chroma", "wan")
QUICK_BENCHMARK_CLASSES = ("CogView4Transformer2DModel",)
_OUTCOME = re.compile(r'^(PASS|FAIL|SKIP) \{"(?:class|family)": "([^"]+)"')


def default_output() -> Path:
    """``compatibility/diffusers.md`` in a source checkout, else ``diffusers.md`` in the current folder."""
    compatibility = paths.compatibility_dir()
    return (compatibility or Path.cwd()) / "diffusers.md"


def default_results_dir(output: Path) -> Path:
    """The committed results (``hf_neuron/compat/data/results/diffusers``) for a checkout's table, else
    ``<output stem>-results`` beside the table."""
    if paths.compatibility_dir() and output.resolve() == default_output().resolve():
        return paths.COMMITTED_DIFFUSERS_RESULTS_DIR
    return output.with_name(f"{output.stem}-results")


@dataclasses.dataclass(frozen=True)
class Step:
    """One recorded run: ``python -m module``, under torchrun when ``torchrun``. It writes its results
    file (``--out``), or with ``prints`` its results are what it prints on stdout."""

    result: str  # key of RESULT_FILES
    title: str
    args: tuple[str, ...]
    module: str
    torchrun: bool = False
    prints: bool = False

    def command(self, results_dir: Path) -> list[str]:
        launcher = [sys.executable]
        if self.torchrun:
            launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={TP_RANKS}"]
        out = () if self.prints else ("--out", str(results_dir / RESULT_FILES[self.result]))
        return [*launcher, "-m", self.module, *self.args, *out]


def plan_steps(quick: bool) -> list[Step]:
    def classes(names) -> tuple[str, ...]:
        return ("--classes", ",".join(names)) if names else ()

    subset = QUICK_CLASSES if quick else None
    tp = "hf_neuron.compat.diffusers.tp_check"
    return [
        Step("tp", f"TP=2 == TP=1 on the neuron device (torchrun, {TP_RANKS} ranks)",
             ("--device", "neuron", *classes(subset)), module=tp, torchrun=True),
        Step("tp_cpu", f"TP=2 == TP=1 on CPU with gloo (torchrun, {TP_RANKS} ranks)",
             ("--device", "cpu", *classes(subset)), module=tp, torchrun=True),
        Step("compile", "regional compilation, 4-step loop", classes(subset),
             module="hf_neuron.compat.diffusers.compile_check"),
        Step("pipelines", "tiny pipelines against CPU, eager and compiled",
             ("--families", ",".join(QUICK_FAMILIES)) if quick else (),
             module="hf_neuron.compat.diffusers.pipeline_check"),
        Step("benchmark", "benchmark: regional vs whole-model compile",
             classes(QUICK_BENCHMARK_CLASSES if quick else None),
             module="hf_neuron.compat.diffusers.compile_benchmark", prints=True),
    ]


def step_env(ranks: int) -> dict:
    """The environment of every step, the CPU one included: hf_neuron's adapters (which install the
    plans under test) activate only where a neuron device exists, so the simulator is switched on
    when there is no Trainium; and the steps import the hf_neuron this process imported (a checkout's,
    whether it is installed or not)."""
    from hf_neuron.compat.runner import expected_device_kind, worker_env

    env = worker_env(expected_device_kind("neuron"), ranks)
    source = paths.source_checkout()
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH")) if p)
    return env


@dataclasses.dataclass
class StepOutcome:
    step: Step
    seconds: float
    returncode: int | None  # None: killed at the timeout
    log: Path
    error: str | None = None  # why the step recorded nothing
    summary: str = ""


def _summarize(step: Step, path: Path) -> str:
    if step.prints:
        rows = [ln for ln in path.read_text().splitlines()[2:] if ln.strip()]  # after its title and header
        errors = sum(" error: " in ln for ln in rows)
        return f"{len(rows)} class(es) measured" + (f", {errors} error(s)" if errors else "")
    records = json.loads(path.read_text())["results"]
    passed = sum(bool(r.get("ok")) for r in records)
    return f"{passed} pass, {len(records) - passed} fail"


def _make_portable(path: Path) -> None:
    """Cut this machine's install locations out of recorded tracebacks and messages."""
    from hf_neuron.compat.frames import portable_text

    source = paths.source_checkout()
    path.write_text(portable_text(path.read_text(), extra_roots=(str(source),) if source else ()))


def run_step(step: Step, results_dir: Path, log_dir: Path, timeout: float, say) -> StepOutcome:
    """Run ``step``, echoing one line per class it reports; its output goes to a log in ``log_dir``."""
    result_path = results_dir / RESULT_FILES[step.result]
    log = log_dir / f"{step.result}.log"
    result_path.unlink(missing_ok=True)
    started = time.perf_counter()
    captured: list[str] = []
    with open(log, "w") as log_file:
        proc = subprocess.Popen(step.command(results_dir), stdout=subprocess.PIPE, stderr=log_file, text=True,
                                env=step_env(TP_RANKS if step.torchrun else 1),
                                start_new_session=True)

        def read() -> None:
            for line in proc.stdout:
                log_file.write(line)
                log_file.flush()
                captured.append(line)
                outcome = _OUTCOME.match(line)
                if outcome:
                    say(f"    {outcome.group(1)} {outcome.group(2)}")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: torchrun and its ranks
            proc.wait()
            returncode = None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        reader.join(timeout=10)
    outcome = StepOutcome(step, time.perf_counter() - started, returncode, log)
    if step.prints and returncode == 0:
        result_path.write_text("".join(captured))
    if returncode is None:
        outcome.error = f"killed after the {timeout:.0f} s timeout"
    elif not result_path.exists():
        outcome.error = f"exited with code {returncode} without writing {result_path.name}"
    if outcome.error is None:
        _make_portable(result_path)
        outcome.summary = _summarize(step, result_path)
    return outcome


def subset_note(quick: bool) -> str | None:
    if not quick:
        return None
    return (f"classes {', '.join(QUICK_CLASSES)}; pipelines "
            f"{', '.join(QUICK_FAMILIES)}; benchmark {', '.join(QUICK_BENCHMARK_CLASSES)}")


def render_table(results_dir: Path, output: Path, *, quick: bool, timeout: float = 600.0) -> str | None:
    """Render the table in a process with the steps' environment (see :mod:`.table`); None or the error."""
    command = [sys.executable, "-m", "hf_neuron.compat.diffusers.table", str(results_dir), str(output)]
    note = subset_note(quick)
    if note:
        command += ["--subset", note]
    done = subprocess.run(command, env=step_env(1), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exited with code {done.returncode}"])[-1]
    return None


def recorded_failures(results_dir: Path) -> list[str]:
    """Names of the classes / pipelines whose recorded check failed."""
    failed = []
    for key in ("tp", "tp_cpu", "compile", "pipelines"):
        path = results_dir / RESULT_FILES[key]
        if path.exists():
            for record in json.loads(path.read_text())["results"]:
                if not record.get("ok"):
                    failed.append(f"{key}: {record.get('class') or record.get('family')}")
    return failed


def run(output: Path, results_dir: Path, *, quick: bool, timeout: float, keep_logs: bool = False,
        say=print) -> int:
    """Run every step, then write the table. 0 when every step recorded its results, else 1."""
    results_dir.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="hf-neuron-compat-diffusers-"))
    steps = plan_steps(quick)
    started = time.perf_counter()
    failed: list[StepOutcome] = []
    for number, step in enumerate(steps, 1):
        say(f"[{number}/{len(steps)}] {step.title} ...")
        outcome = run_step(step, results_dir, log_dir, timeout, say)
        if outcome.error:
            failed.append(outcome)
            tail = outcome.log.read_text().strip().splitlines()[-15:] if outcome.log.exists() else []
            say(f"[{number}/{len(steps)}] FAILED after {outcome.seconds:.0f} s: {outcome.error}; log {outcome.log}")
            for line in tail:
                say(f"    | {line}")
        else:
            say(f"[{number}/{len(steps)}] done in {outcome.seconds:.0f} s: {outcome.summary}")
    if failed:
        say(f"hf-neuron compat diffusers: {len(failed)} step(s) recorded nothing; {output} left unchanged "
            f"(logs in {log_dir})")
        return 1
    say("rendering the table ...")
    error = render_table(results_dir, output, quick=quick)
    if error:
        say(f"hf-neuron compat diffusers: rendering {output} failed: {error}")
        return 1
    if not keep_logs:
        for log in log_dir.iterdir():
            log.unlink()
        log_dir.rmdir()
    else:
        say(f"logs kept in {log_dir}")
    say(f"wrote {output} from {results_dir} in {time.perf_counter() - started:.0f} s")
    return 0
