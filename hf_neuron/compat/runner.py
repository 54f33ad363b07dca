"""Runs a compatibility sweep: worker processes, timeouts, durable results, resume.

Phase 1 runs L1-L4: ``jobs`` worker processes each take the next architecture from a shared queue.
A worker serves many architectures (start-up is paid once); when one crashes, hangs past the timeout
or is killed for memory, the architecture is recorded as failing with the reason and the level it was
in, and a fresh worker takes the next one. Phase 2 runs L5 for the architectures with a TP plan: one
torchrun job (2 processes) working through them, restarted after a crash the same way.

The results file is rewritten atomically after every architecture.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from hf_neuron.compat import paths
from hf_neuron.compat import results as R
from hf_neuron.compat.archs import KIND_REMOTE_CODE, KIND_TEST, ArchSpec
from hf_neuron.compat.procs import EOF, TIMEOUT, Child, describe_exit, innermost_frame, last_error_line

STARTUP_TIMEOUT = 180.0


class FatalRunError(RuntimeError):
    """The run cannot go on (device unusable, results file for another configuration...)."""


@dataclasses.dataclass
class RunConfig:
    specs: list[ArchSpec]
    device: str = "neuron"
    levels: tuple[str, ...] = R.LEVELS
    output: Path | None = None
    jobs: int = 1
    timeout: float = 300.0
    resume: bool = False
    rerun_failed: bool = False
    progress: bool = True
    keep_workdir: bool = False
    tp_size: int = 2
    all_types: bool = False  # a --all sweep: record the causal-LM mapping as the all-types denominator
    images: bool = False  # the image-text-to-text run (its own results file, its own L3 check)


# ---- environment ---------------------------------------------------------------------------------
def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def real_torch_neuronx() -> bool:
    try:
        importlib.metadata.distribution("torch-neuronx")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def expected_device_kind(device: str) -> str:
    kind = device.split(":")[0]
    if kind == "cpu":
        return "cpu"
    if kind != "neuron":
        raise FatalRunError(f"--device must be 'neuron' (or 'cpu' to test the harness itself), not {device!r}")
    forced = os.environ.get("HF_NEURON_SIMULATOR", "").strip().lower() == "force"
    return "trainium" if real_torch_neuronx() and not forced else "simulated"


def default_output(device: str, images: bool = False) -> Path:
    """The committed results file in a source checkout, else ``./<transformers version>-<device kind>.json``
    (``images/`` below either for the image-text-to-text run)."""
    kind = expected_device_kind(device)
    return paths.default_results_dir(images) / R.results_filename(_dist_version("transformers"), kind)


def worker_env(device_kind: str, jobs: int) -> dict:
    env = dict(os.environ)
    if device_kind == "simulated" and env.get("HF_NEURON_SIMULATOR", "0").strip().lower() in ("", "0", "false", "no", "off"):
        env["HF_NEURON_SIMULATOR"] = "1"
    threads = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    env.setdefault("HF_NEURON_COMPAT_THREADS", threads)
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    env.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    return env


# ---- records for architectures whose worker died ---------------------------------------------------
def dead_worker_record(spec: ArchSpec, partial: dict | None, level: str | None, levels, why: str,
                       log_text: str, seconds: float) -> dict:
    record = partial if partial is not None else R.new_record(spec)
    level = level or next((lv for lv in R.LEVELS if lv in levels and lv not in record["levels"]), "L1")
    detail = last_error_line(log_text)
    reason = why if not detail or detail in why else f"{why}: {detail}"
    R.set_level(record, level, "fail", reason=reason, op=innermost_frame(log_text))
    for lv in R.LEVELS:
        if lv not in record["levels"]:
            R.set_level(record, lv, "skip", reason=(R.NOT_REQUESTED if lv not in levels
                                                     else f"not run: the worker died in {level}"))
    record["timings"]["total"] = round(seconds, 3)
    R.order_levels(record)
    return record


class _Progress:
    def __init__(self, total: int, desc: str, enabled: bool):
        self.bar = None
        self.passed = self.failed = 0
        if enabled and total:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="arch", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                self.bar = None

    def update(self, name: str, ok: bool) -> None:
        self.passed += ok
        self.failed += not ok
        if self.bar is not None:
            self.bar.set_postfix_str(f"pass={self.passed} fail={self.failed} last={name}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Runner:
    def __init__(self, config: RunConfig, log: Callable[[str], None] | None = None):
        self.config = config
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.device_kind = expected_device_kind(config.device)
        self.output = Path(config.output) if config.output else default_output(config.device, config.images)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.children: set[Child] = set()
        self.env_info: dict | None = None
        self.fatal: str | None = None
        self.workdir: Path | None = None
        self.results: dict | None = None

    # ---- planning ---------------------------------------------------------------------------
    def load_results(self) -> dict:
        tv, torch_v = _dist_version("transformers"), _dist_version("torch")
        if self.output.exists():
            existing = R.load(self.output)
            if existing["transformers_version"] != tv or existing["device_kind"] != self.device_kind:
                raise FatalRunError(
                    f"{self.output} holds results for transformers {existing['transformers_version']} on "
                    f"{existing['device_kind']}, this run is transformers {tv} on {self.device_kind}; "
                    "choose another --output")
            existing["torch_version"] = torch_v
            results = existing
        else:
            results = R.new_results(tv, torch_v, self.device_kind)
        if self.config.all_types:
            from hf_neuron.compat.archs import causal_lm_model_types

            results["causal_lm_types"] = sorted(causal_lm_model_types())
        task = R.TASK_IMAGES if self.config.images else R.TASK_TEXT
        if self.output.exists() and results.get("task", R.TASK_TEXT) != task:
            raise FatalRunError(f"{self.output} holds {results.get('task', R.TASK_TEXT)} results, this run is "
                                f"{task}; choose another --output")
        if self.config.images:
            results["task"] = R.TASK_IMAGES
        if "L3" in self.config.levels:
            if self.config.images:
                from hf_neuron.compat.image_levels import L3_CHECK
            else:
                from hf_neuron.compat.levels import L3_CHECK

            results["l3_check"] = L3_CHECK
        return results

    def plan(self) -> tuple[list[ArchSpec], list[ArchSpec], int]:
        """(architectures for phase 1, architectures needing only L5, number already done)."""
        cfg = self.config
        existing = R.by_model_type(self.results)
        main, only_l5, done = [], [], 0
        for spec in cfg.specs:
            rec = existing.get(spec.model_type)
            if not (cfg.resume or cfg.rerun_failed) or rec is None:
                if rec is None and cfg.rerun_failed and not cfg.resume:
                    done += 1  # never run: --rerun-failed alone retries failures only
                    continue
                main.append(spec)
                continue
            if cfg.rerun_failed and R.has_failure(rec):
                main.append(spec)
                continue
            missing = R.missing_levels(rec, cfg.levels) if cfg.resume else []
            if not missing:
                done += 1
            elif set(missing) <= {"L5"} and rec["levels"].get("L1") == "pass":
                only_l5.append(spec)
            else:
                main.append(spec)
        return main, only_l5, done

    # ---- recording --------------------------------------------------------------------------
    def record(self, record: dict) -> None:
        with self.lock:
            R.upsert(self.results, record)
            R.write_atomic(self.output, self.results)

    # ---- phase 1 ----------------------------------------------------------------------------
    def _start_worker(self, slot: int) -> Child:
        cfg = self.config
        cmd = [sys.executable, "-m", "hf_neuron.compat.worker", "--device", cfg.device,
               "--levels", ",".join(cfg.levels), "--workdir", str(self.workdir / "models")]
        child = Child(cmd, worker_env(self.device_kind, cfg.jobs), self.workdir / f"worker-{slot}.log")
        with self.lock:
            self.children.add(child)
        event = child.next_event(STARTUP_TIMEOUT)
        if event is TIMEOUT or event is EOF or event.get("event") != "ready":
            text = child.log_since(0)
            child.kill()
            raise FatalRunError(f"worker failed to start ({describe_exit(child.proc.returncode)}): "
                                f"{last_error_line(text)}")
        return child

    def _retire(self, child: Child | None, kill: bool = False) -> None:
        if child is None:
            return
        if kill:
            child.kill()
        child.close()
        with self.lock:
            self.children.discard(child)

    def _on_env(self, event: dict) -> None:
        with self.lock:
            if self.env_info is None:
                self.env_info = event
                if event["device_kind"] != self.device_kind:
                    self.fatal = (f"workers run on {event['device_kind']!r}, expected {self.device_kind!r} "
                                  "(check HF_NEURON_SIMULATOR / torch-neuronx)")
                self.results["torch_version"] = event["torch_version"]

    def run_one(self, child: Child, spec: ArchSpec) -> tuple[dict, bool]:
        """Run ``spec`` on ``child``; returns (record, whether the worker is still usable)."""
        timeout = self.config.timeout
        offset = child.log_size()
        start = time.monotonic()
        child.send(spec.to_json())
        partial, level, stage = None, None, None
        deadline = start + timeout
        while True:
            event = child.next_event(min(1.0, deadline - time.monotonic()))
            if self.stop.is_set():
                raise KeyboardInterrupt
            if event is TIMEOUT:
                if time.monotonic() < deadline:
                    continue
                child.dump_stacks()
                text = child.log_since(offset)
                where = (f" in {level}" if level else "") + (f" ({stage})" if stage else "")
                record = dead_worker_record(spec, partial, level, self.config.levels,
                                            f"timeout after {timeout:g}s{where} (hang)", "", time.monotonic() - start)
                frame = innermost_frame(text)
                if frame:
                    record["failures"][record["failure"]["level"]]["op"] = frame
                    R.refresh_failure(record)
                return record, False
            if event is EOF:
                returncode = child.wait(10)
                text = child.log_since(offset)
                record = dead_worker_record(spec, partial, level, self.config.levels,
                                            describe_exit(returncode) + (f" in {level}" if level else "")
                                            + (f" ({stage})" if stage else ""),
                                            text, time.monotonic() - start)
                return record, False
            kind = event.get("event")
            if kind == "fatal":
                self.fatal = event["reason"]
                raise FatalRunError(event["reason"])
            if kind == "env":
                self._on_env(event)
                if self.fatal:
                    raise FatalRunError(self.fatal)
            elif kind == "level_start":
                level, stage = event["level"], None
            elif kind == "stage":
                stage = event["stage"]
            elif kind == "level_result":
                partial, level, stage = event["record"], None, None
            elif kind == "result":
                return event["record"], True

    def _slot(self, slot: int, todo: queue.Queue, progress: _Progress, errors: list) -> None:
        child = None
        try:
            while not self.stop.is_set():
                try:
                    spec = todo.get_nowait()
                except queue.Empty:
                    break
                if child is None:
                    child = self._start_worker(slot)
                record, healthy = self.run_one(child, spec)
                if not healthy:
                    self._retire(child, kill=True)
                    child = None
                self.record(record)
                progress.update(spec.model_type, R.passes_compiled(record, [lv for lv in ("L1", "L2", "L3")
                                                                           if lv in self.config.levels]))
        except KeyboardInterrupt:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            self.stop.set()
        finally:
            self._retire(child, kill=self.stop.is_set())

    def run_phase1(self, specs: list[ArchSpec]) -> None:
        # Not testable (no class in transformers): recorded as such without starting a worker.
        for spec in [s for s in specs if s.kind == KIND_REMOTE_CODE]:
            from hf_neuron.compat.levels import ArchRun

            self.record(ArchRun(spec, self.config.device, self.workdir, lambda ev: None).run(list(self.config.levels)))
        specs = [s for s in specs if s.kind != KIND_REMOTE_CODE]
        if not specs:
            return
        # Longest first (by an earlier run's timings, when there is one) so the sweep does not end
        # with one worker busy on a slow architecture while the others idle; unknown ones first.
        previous = R.by_model_type(self.results)

        def cost(spec):
            rec = previous.get(spec.model_type)
            return -(rec or {}).get("timings", {}).get("total", float("inf"))

        todo: queue.Queue = queue.Queue()
        for spec in sorted(specs, key=cost):
            todo.put(spec)
        jobs = max(1, min(self.config.jobs, len(specs)))
        progress = _Progress(len(specs), "compat L1-L4", self.config.progress)
        errors: list = []
        threads = [threading.Thread(target=self._slot, args=(i, todo, progress, errors), daemon=True)
                   for i in range(jobs)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        finally:
            progress.close()
        if errors:
            raise errors[0]

    # ---- phase 2: L5 -----------------------------------------------------------------------------
    def l5_candidates(self) -> list[ArchSpec]:
        """Architectures of this run still without an L5 outcome whose L1 passed with a TP plan."""
        existing = R.by_model_type(self.results)
        out = []
        for spec in self.config.specs:
            rec = existing.get(spec.model_type)
            if (rec is not None and R.missing_levels(rec, ["L5"]) and rec["levels"].get("L1") == "pass"
                    and rec["details"].get("L1", {}).get("tp_plan")):
                out.append(spec)
        return out

    def _skip_l5(self, specs: list[ArchSpec], reason: str) -> None:
        existing = R.by_model_type(self.results)
        for spec in specs:
            rec = existing[spec.model_type]
            R.set_level(rec, "L5", "skip", reason=reason)
            R.order_levels(rec)
            self.record(rec)

    def run_phase2(self, specs: list[ArchSpec]) -> None:
        if not specs:
            return
        real = [s for s in specs if s.kind != KIND_TEST]
        if real and self.env_info is None:
            self.env_info = self._probe_env()
        if real and not self.env_info.get("dist_backend_available"):
            backend = self.env_info.get("dist_backend", "neuron")
            self._skip_l5(real, f"process-group backend {backend!r} is not available in this environment, so "
                                "tensor parallelism under torchrun cannot run")
            specs = [s for s in specs if s.kind == KIND_TEST]
            if not specs:
                return
        progress = _Progress(len(specs), f"compat L5 (TP={self.config.tp_size})", self.config.progress)
        remaining = list(specs)
        try:
            while remaining and not self.stop.is_set():
                remaining = self._tp_job(remaining, progress)
        finally:
            progress.close()

    def _probe_env(self) -> dict:
        code = ("import json,sys; from hf_neuron.compat.worker import environment; "
                "print(json.dumps(environment(sys.argv[1])))")
        import subprocess

        out = subprocess.run([sys.executable, "-c", code, self.config.device], capture_output=True, text=True,
                             env=worker_env(self.device_kind, 1), timeout=STARTUP_TIMEOUT)
        try:
            return json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"dist_backend_available": False, "dist_backend": "neuron"}

    def _tp_job(self, specs: list[ArchSpec], progress: _Progress) -> list[ArchSpec]:
        """Run one torchrun job over ``specs``; returns those left when it died."""
        cfg = self.config
        job_dir = Path(tempfile.mkdtemp(prefix="tp-", dir=self.workdir))
        archs_file = job_dir / "archs.json"
        archs_file.write_text(json.dumps([s.to_json() for s in specs]))
        events_file = job_dir / "events.jsonl"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cfg.tp_size}",
               "-m", "hf_neuron.compat.tp_worker", "--device", cfg.device, "--workdir", str(self.workdir / "models"),
               "--archs-file", str(archs_file), "--events-file", str(events_file)]
        env = worker_env(self.device_kind, cfg.tp_size)
        child = Child(cmd, env, job_dir / "torchrun.log", events_file=events_file, stdin=False)
        with self.lock:
            self.children.add(child)
        existing = R.by_model_type(self.results)
        remaining = list(specs)
        current, offset, start = None, 0, time.monotonic()
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT + cfg.timeout
            while remaining:
                event = child.next_event(min(1.0, deadline - time.monotonic()))
                if self.stop.is_set():
                    raise KeyboardInterrupt
                if event is TIMEOUT and time.monotonic() < deadline:
                    continue
                if event is not TIMEOUT and event is not EOF and event.get("event") == "fatal":
                    self._skip_l5(remaining, event["reason"])
                    for spec in remaining:
                        progress.update(spec.model_type, False)
                    return []
                if event is TIMEOUT or event is EOF:
                    victims = [current] if current is not None else list(remaining)
                    if event is TIMEOUT:
                        child.dump_stacks()
                        why = f"timeout after {cfg.timeout:g}s (hang) in TP={cfg.tp_size} job"
                    else:
                        why = f"{describe_exit(child.wait(10))} (torchrun TP={cfg.tp_size} job)"
                    child.kill()
                    text = child.log_since(offset)
                    detail = last_error_line(text)
                    if current is None:
                        why += " before its first architecture"
                    for spec in victims:
                        rec = existing[spec.model_type]
                        R.set_level(rec, "L5", "fail", reason=why if not detail else f"{why}: {detail}",
                                    op=innermost_frame(text), seconds=time.monotonic() - start)
                        R.order_levels(rec)
                        self.record(rec)
                        progress.update(spec.model_type, False)
                    names = {s.model_type for s in victims}
                    return [s for s in remaining if s.model_type not in names]
                kind = event.get("event")
                if kind == "start":
                    current = next(s for s in remaining if s.model_type == event["model_type"])
                    offset, start = child.log_size(), time.monotonic()
                    deadline = start + cfg.timeout
                elif kind == "result":
                    name = event["model_type"]
                    rec = existing[name]
                    R.set_level(rec, "L5", event["status"], reason=event.get("reason"), op=event.get("op"),
                                details=event.get("details"), seconds=event.get("seconds"))
                    rec["timings"]["total"] = round(rec["timings"].get("total", 0) + (event.get("seconds") or 0), 3)
                    R.order_levels(rec)
                    self.record(rec)
                    progress.update(name, event["status"] == "pass")
                    remaining = [s for s in remaining if s.model_type != name]
                    current = None
            return []
        finally:
            child.close()
            with self.lock:
                self.children.discard(child)

    # ---- entry point -----------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.config
        self.results = self.load_results()
        main, only_l5, done = self.plan()
        if done:
            self.log(f"hf-neuron compat: {done} architecture(s) already recorded in {self.output}, skipped")
        if cfg.all_types:  # the denominator is recorded even when every type was recorded before
            R.write_atomic(self.output, self.results)
        self.workdir = Path(tempfile.mkdtemp(prefix="hf-neuron-compat-"))
        try:
            self.run_phase1(main)
            if self.fatal:
                raise FatalRunError(self.fatal)
            if "L5" in cfg.levels:
                self.run_phase2(self.l5_candidates())
            # Architectures whose L5 could not be planned (e.g. L1 failed in an earlier run).
            return self.results
        except KeyboardInterrupt:
            self.stop.set()
            raise
        finally:
            self.stop.set()
            with self.lock:
                children = list(self.children)
            for child in children:
                child.kill()
                child.close()
            if not cfg.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
