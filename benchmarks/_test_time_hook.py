"""Per-process time accounting for ``benchmarks/test_time.py`` (loaded as ``sitecustomize`` in every
Python process the measured test run starts: pytest, its workers, their subprocesses and torchrun ranks).

Each process appends two JSON lines to ``$HF_NEURON_TEST_TIME_DIR/<pid>.jsonl``: one when it starts and
one when it exits (a process that is killed leaves only the first). The exit line holds the process's
CPU time and the seconds spent in each measured activity, keyed by the test that was running when the
activity happened (``PYTEST_CURRENT_TEST``: set by pytest around every test phase in its own process,
inherited by every process a test starts):

- ``imports``: first import of the large libraries (torch, transformers, trl, diffusers, peft,
  accelerate, datasets), each counted once, excluding the libraries it imports itself;
- ``dynamo``: Dynamo turning Python frames into graphs (``convert_frame._compile`` minus the backend);
- ``backend``: the graph compiler behind Dynamo (the simulated Neuron compiler: AOTAutograd and checks);
- ``loading``: ``from_pretrained`` of a Transformers model (outermost call only);
- ``tiny``: building and saving the tests' tiny models (``hf_neuron.tiny_models``);
- ``cpu_generate``: ``generate`` of a model on CPU (the reference runs the tests compare with);
- ``in_process`` and ``in_process_cpu``: in pytest's own processes, the wall and CPU time of each
  test's setup, call and teardown (this module is also loaded as a pytest plugin, through
  ``PYTEST_PLUGINS``).

Nothing here changes what a process computes: the wrappers only read the clock around the original call.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time

_DIR = os.environ.get("HF_NEURON_TEST_TIME_DIR")
_LIBRARIES = {"torch", "transformers", "trl", "diffusers", "peft", "accelerate", "datasets"}
_START = time.time()
_TEST = os.environ.get("PYTEST_CURRENT_TEST", "")
_times: dict[str, dict[str, float]] = {}
_depth: dict[str, int] = {}
_import_stack: list[float] = []  # seconds spent in nested library imports, per open import


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", _TEST)


def _add(category: str, seconds: float, test: str | None = None) -> None:
    """``seconds`` of ``category`` for ``test`` (default: the test running now)."""
    per_test = _times.setdefault(category, {})
    test = _current_test() if test is None else test
    per_test[test] = per_test.get(test, 0.0) + seconds


def _role() -> str:
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(os.path.join("torch", "distributed", "run.py")) or os.path.basename(argv0) == "torchrun":
        return "torchrun launcher"
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun rank"
    if "_pytest" in sys.modules and (argv0.endswith(("pytest", "__main__.py")) or "PYTEST_XDIST_WORKER" in os.environ):
        return "pytest"  # pytest itself or one of its xdist workers (their children inherit the variable, not pytest)
    return "subprocess"


def _timed(category: str, function):
    """``function`` timed under ``category``, outermost call only (a nested call is inside its time)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        depth = _depth.get(category, 0)
        if depth:
            return function(*args, **kwargs)
        _depth[category] = depth + 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _depth[category] = depth
            _add(category, time.perf_counter() - start)

    return wrapper


def _wrap_dynamo(module) -> None:
    original = module._compile

    @functools.wraps(original)
    def compile_frame(*args, **kwargs):
        backend_before = sum(_times.get("backend", {}).values())
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            backend = sum(_times.get("backend", {}).values()) - backend_before
            _add("dynamo", time.perf_counter() - start - backend)

    module._compile = compile_frame


def _wrap_output_graph(module) -> None:
    cls = module.OutputGraph
    cls.call_user_compiler = _timed("backend", cls.call_user_compiler)


def _wrap_modeling_utils(module) -> None:
    cls = module.PreTrainedModel
    cls.from_pretrained = classmethod(_timed("loading", cls.from_pretrained.__func__))


def _wrap_generation(module) -> None:
    cls = module.GenerationMixin
    original = cls.generate
    timed = _timed("cpu_generate", original)

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        on_cpu = getattr(getattr(self, "device", None), "type", None) == "cpu"
        return (timed if on_cpu else original)(self, *args, **kwargs)

    cls.generate = generate


def _wrap_tiny_models(module) -> None:
    for name in ("build_model", "save_tiny_model"):
        if hasattr(module, name):
            setattr(module, name, _timed("tiny", getattr(module, name)))


_AFTER_IMPORT = {
    "torch._dynamo.convert_frame": _wrap_dynamo,
    "torch._dynamo.output_graph": _wrap_output_graph,
    "transformers.modeling_utils": _wrap_modeling_utils,
    "transformers.generation.utils": _wrap_generation,
    "hf_neuron.tiny_models": _wrap_tiny_models,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Times the first import of each large library and wraps the measured functions once their
    modules are loaded."""

    def find_spec(self, name, path=None, target=None):
        if name not in _AFTER_IMPORT and name not in _LIBRARIES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def timed_exec(module):
            if name not in _LIBRARIES:  # a module to wrap: its import time counts in its library's
                exec_module(module)
                _AFTER_IMPORT[name](module)
                return
            _import_stack.append(0.0)
            start = time.perf_counter()
            try:
                exec_module(module)
            finally:
                elapsed = time.perf_counter() - start
                _add("imports", elapsed - _import_stack.pop())
                if _import_stack:
                    _import_stack[-1] += elapsed
            if name in _AFTER_IMPORT:
                _AFTER_IMPORT[name](module)

        spec.loader.exec_module = timed_exec
        return spec


_cpu_at_last_report = [time.process_time()]


def pytest_runtest_logreport(report) -> None:
    """pytest hook: the phase's wall time, and the process's CPU time since the previous phase ended, in
    the process that ran it (not again where xdist forwards the report)."""
    if getattr(report, "node", None) is None:
        now = time.process_time()
        _add("in_process", report.duration, report.nodeid)
        _add("in_process_cpu", now - _cpu_at_last_report[0], report.nodeid)
        _cpu_at_last_report[0] = now


def _write(record: dict) -> None:
    with open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


def _finish() -> None:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    _write({"event": "exit", "pid": os.getpid(), "end": time.time(), "cpu": usage.ru_utime + usage.ru_stime,
            "role": _role(), "times": _times})


if _DIR:
    _write({"event": "start", "pid": os.getpid(), "ppid": os.getppid(), "start": _START, "test": _TEST,
            "role": _role(), "argv": sys.argv[:4]})
    sys.meta_path.insert(0, _Finder())
    atexit.register(_finish)
    _os_exit = os._exit

    def _exit_after_writing(status):
        try:
            _finish()
        finally:
            _os_exit(status)

    os._exit = _exit_after_writing
