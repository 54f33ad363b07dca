"""Test-wide set-up: the simulated Neuron device is installed in the pytest process.

Where a real torch-neuronx is installed this stays off and the same tests run on real Trainium.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The tests state the simulated machine they expect (a trn2 chip: 4 logical cores of 24 GiB) and
# whether hf_neuron is on; a user's own settings must not change what they check. Cleared before
# `import torch`, which installs the device. Subprocesses the tests start inherit the cleared set.
ISOLATED_PREFIXES = ("HF_NEURON_SIM_", "NEURON_")
ISOLATED_NAMES = ("HF_NEURON_DISABLE",)
for _name in [n for n in os.environ if n.startswith(ISOLATED_PREFIXES) or n in ISOLATED_NAMES]:
    del os.environ[_name]
# The processes the tests start (torchrun ranks, the CLI, training runs: a few hundred) load hf_neuron's
# bytecode from __pycache__ instead of compiling its sources again each, also where the environment
# turns bytecode writing off (PYTHONDONTWRITEBYTECODE, set on some CI images). The pytest processes keep
# the setting: tests there rewrite and re-import throw-away modules, which a cached bytecode could shadow.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Compiled-graph cache entries of this session only: hits and misses must not depend on earlier runs.
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="hf_neuron-test-neff-")

import torch  # noqa: E402

from hf_neuron.simulator import install  # noqa: E402

install()

# Tiny models on a 2-core runner: intra-op threads only contend with the other work (pytest's workers,
# the ranks and commands the tests start, each with one thread).
torch.set_num_threads(1)

NEURON = torch.device("neuron")


@pytest.fixture
def neuron():
    return torch.device("neuron", torch.neuron.current_device())


@pytest.fixture
def static_shapes():
    """Dynamo without automatic dynamic shapes, for one test.

    Torch config options are changed with their own ``patch`` (never ``monkeypatch.setattr``: the
    options do not live in the module's ``__dict__``, and pytest's undo may delete them).
    """
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        yield


@pytest.fixture
def scratch_modules(tmp_path, monkeypatch):
    """``write("pkg/mod.py", source)``: a throw-away module on its own path entry, importable as
    ``pkg.mod``; every module written is dropped from ``sys.modules`` before and after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(relative_path: str, source: str):
        path = tmp_path / relative_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        name = relative_path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        sys.modules.pop(name, None)
        names.append(name)
        return path

    yield write
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """``built_once(name, build) -> Path``: ``build(path)`` runs once per test run, in whichever pytest-xdist
    worker asks first; the other workers wait for it and reuse the folder (a training run or a tiny
    checkpoint several test files check is made once, not once per worker). A build that raises leaves
    nothing behind, so the next request builds again (and fails the same way)."""
    import shutil

    from filelock import FileLock

    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    root = base.parent / f"built-once-{run_id}" if run_id else base / "built-once"
    root.mkdir(parents=True, exist_ok=True)

    def get(name: str, build):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (root / f"{name}.done").exists():
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir(parents=True)
                try:
                    build(path)
                except BaseException:
                    shutil.rmtree(path, ignore_errors=True)
                    raise
                (root / f"{name}.done").touch()
        return path

    return get


_running: list = []  # the test item whose setup, call or teardown runs now


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


def _starts_torchrun(args) -> bool:
    """Whether a command starts a torchrun job: ``python -m torch.distributed.run ...`` or the ``torchrun``
    script, given as an argument list or as one shell string."""
    if isinstance(args, (str, bytes, os.PathLike)):
        words = os.fsdecode(args).split()
    else:
        words = [os.fsdecode(a) for a in args if isinstance(a, (str, bytes, os.PathLike))]
    as_module = any(flag == "-m" and module == "torch.distributed.run" for flag, module in zip(words, words[1:]))
    return as_module or (bool(words) and os.path.basename(words[0]) == "torchrun")


def pytest_configure(config):
    """README command 2 leaves out the tests that start torchrun jobs (``-m "not distributed"``), which CI runs
    in a step of its own: a test that starts one without the ``distributed`` marker fails at the launch,
    naming the marker, instead of silently making command 2 slower."""
    import subprocess

    launch = subprocess.Popen.__init__

    def checked(self, args, *rest, **kwargs):
        item = _running[-1] if _running else None
        if item is not None and item.get_closest_marker("distributed") is None and _starts_torchrun(args):
            raise RuntimeError(f"{item.nodeid} starts a torchrun job: mark it @pytest.mark.distributed (README "
                               "command 2 leaves those tests to CI's distributed step)")
        launch(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = checked


#: Seconds each test took (setup, call and teardown) in a recorded run of the suite (``--record-durations``).
TEST_DURATIONS = Path(__file__).with_name("test_durations.json")


def pytest_addoption(parser):
    parser.addoption("--record-durations", nargs="?", const=str(TEST_DURATIONS), default=None, metavar="PATH",
                     help=f"write the seconds each test of this run took into PATH (default tests/{TEST_DURATIONS.name}, "
                          "which orders the files pytest-xdist's workers take: longest first); other tests' records "
                          "are kept")


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def order_files_longest_first(items: list, durations: dict[str, float]) -> list:
    """``items`` grouped by file, the files in decreasing recorded duration of their selected tests and a file
    without any record first (a new file's cost is unknown); the tests of a file keep their order.

    Under ``-n auto --dist=loadfile`` a worker takes a whole file, the next one in this order, whenever it runs
    out of work. In collection order a long file (minutes of torchrun jobs) can come last and run alone while
    the other worker idles; longest first, the last files to start are short ones."""
    seconds: dict[str, float] = {}
    recorded: set[str] = set()
    for item in items:
        name = _file(item.nodeid)
        seconds[name] = seconds.get(name, 0.0) + durations.get(item.nodeid, 0.0)
        if item.nodeid in durations:
            recorded.add(name)
    rank = {name: (name in recorded, -seconds[name], i) for i, name in enumerate(seconds)}
    return sorted(items, key=lambda item: rank[_file(item.nodeid)])


def pytest_collection_modifyitems(config, items):
    # Only pytest-xdist's workers schedule files; a single process keeps collection order.
    if hasattr(config, "workerinput") and TEST_DURATIONS.exists():
        items[:] = order_files_longest_first(items, json.loads(TEST_DURATIONS.read_text()))


_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # Every phase of every test, as reported to the process that prints the results.
    _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    path = config.getoption("record_durations")
    if path and not hasattr(config, "workerinput") and _test_seconds:
        path = Path(path)
        recorded = json.loads(path.read_text()) if path.exists() else {}
        root = config.rootpath
        recorded = {nodeid: s for nodeid, s in recorded.items() if (root / _file(nodeid)).exists()}
        recorded.update({nodeid: round(seconds, 1) for nodeid, seconds in _test_seconds.items()})
        path.write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n")


#: ``pytest -n auto`` runs at most this many workers: each holds Transformers, TRL and Diffusers
#: (about 2 GiB) and the distributed tests start up to 4 processes of their own.
MAX_AUTO_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    return max(1, min(os.cpu_count() or 1, MAX_AUTO_WORKERS))
