"""Builds (once, cached) and loads the simulator's C++ extension."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sys
from pathlib import Path

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = ["runtime.cpp", "ops.cpp", "amp.cpp", "attention.cpp", "module.cpp"]
_module = None


def _source_files(csrc: Path) -> list[Path]:
    """The C++ sources and headers of an extension, by name."""
    return sorted((p for p in csrc.iterdir() if p.suffix in (".cpp", ".h")), key=lambda p: p.name)


def _build_dir(csrc: Path, cache_kind: str) -> Path:
    """A build folder per torch installation, Python version and content of the C++ sources.

    The torch installation's folder is part of the key, not only its version: two environments
    with the same torch (a virtual environment beside the system one) compile against different
    include paths, and sharing one folder would make each rebuild the other's extension. Where the
    sources live is not: the build compiles copies of them kept in the folder (see
    :func:`_sources_in`), so every checkout or installed wheel with the same sources loads one build.
    """
    import torch

    digest = hashlib.sha256(str(Path(torch.__file__).resolve().parent).encode())
    for path in _source_files(csrc):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    tag = f"torch{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{digest.hexdigest()[:12]}"
    root = Path(os.environ.get("HF_NEURON_CACHE", Path.home() / ".cache" / "hf_neuron"))
    path = root / cache_kind / tag
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sources_in(build_dir: Path, csrc: Path) -> Path:
    """The C++ sources copied into ``build_dir/src`` (once: the folder's name is their content's hash).

    torch's builder records the source paths in the folder's ninja file and rebuilds when a source is
    newer than its object. Compiling the checkout's own files would rebuild after every fresh clone or
    reinstall (new file dates, same content) and on every switch between two checkouts; the copies
    keep their dates, so an unchanged extension is built once per torch installation.
    """
    import shutil

    src = build_dir / "src"
    if not src.is_dir():
        staging = build_dir / "src.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for path in _source_files(csrc):
            shutil.copy2(path, staging / path.name)
        staging.rename(src)
    return src


def build_and_load(name: str, csrc: Path, sources: list[str], cache_kind: str, first_build_note: str | None):
    """Compile (once, cached under ``$HF_NEURON_CACHE/<cache_kind>``) and import a C++ extension.

    Concurrent callers (the ranks of one torchrun) share one build: they wait for each other on
    an OS file lock, which is released when its holder exits, however it exits.
    ``first_build_note`` is printed to stderr before a first build.
    """
    with _without_cuda_home_warning():
        from torch.utils import cpp_extension

    build_dir = _build_dir(csrc, cache_kind)
    with _exclusive(build_dir, stale_lock_blocks=hasattr(cpp_extension, "FileBaton")):
        if first_build_note and not any(build_dir.glob("*.so")):
            print(f"hf_neuron: {first_build_note}", file=sys.stderr, flush=True)
        src = _sources_in(build_dir, csrc)
        return cpp_extension.load(
            name=name,
            sources=[str(src / s) for s in sources],
            extra_cflags=["-O2"],
            build_directory=str(build_dir),
            verbose=os.environ.get("HF_NEURON_BUILD_VERBOSE") == "1",
        )


@contextlib.contextmanager
def _without_cuda_home_warning():
    """A CUDA build of torch (torch 2.14's wheels) warns at the builder's import that no CUDA runtime is
    found; the simulator builds CPU code only, and the warning would be in every process's output."""

    class _DropCudaHome(logging.Filter):
        def filter(self, record):
            return "No CUDA runtime is found" not in record.getMessage()

    builder_logger = logging.getLogger("torch.utils.cpp_extension")
    drop = _DropCudaHome()
    builder_logger.addFilter(drop)
    try:
        yield
    finally:
        builder_logger.removeFilter(drop)


@contextlib.contextmanager
def _exclusive(build_dir: Path, stale_lock_blocks: bool):
    """Hold the build folder alone.

    torch's builder before 2.14 (``FileBaton``) marks a build in progress with a ``lock`` file that it
    deletes when it finishes; a build interrupted by Ctrl-C or a kill leaves the file behind and every
    later process waits for it forever, silently. Under this OS lock no other process can be building,
    so with such a builder a ``lock`` file found here is a leftover and is removed. torch 2.14 holds an
    OS lock on that file instead and keeps the file: nothing to remove.
    """
    with open(build_dir / "build.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            leftover = build_dir / "lock"
            if stale_lock_blocks and leftover.exists():
                print(f"hf_neuron: removing {leftover}, left by an interrupted build", file=sys.stderr, flush=True)
                leftover.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load():
    """Return the compiled extension module, compiling it on first use (about a minute on 2 cores)."""
    global _module
    if _module is None:
        _module = build_and_load(
            "hf_neuron_simulator_C", _CSRC, _SOURCES, "simulator",
            "building the simulated Neuron device extension (once per torch version; ~1 min)...",
        )
    return _module
