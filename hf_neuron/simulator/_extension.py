"""Builds (once, cached) and loads the simulator's C++ extension."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = ["runtime.cpp", "ops.cpp", "amp.cpp", "attention.cpp", "module.cpp"]
_module = None


def _build_dir() -> Path:
    import torch

    digest = hashlib.sha256()
    for name in sorted(p.name for p in _CSRC.iterdir()):
        digest.update(name.encode())
        digest.update((_CSRC / name).read_bytes())
    tag = f"torch{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{digest.hexdigest()[:12]}"
    root = Path(os.environ.get("HF_NEURON_CACHE", Path.home() / ".cache" / "hf_neuron"))
    path = root / "simulator" / tag
    path.mkdir(parents=True, exist_ok=True)
    return path


def load():
    """Return the compiled extension module, compiling it on first use (about a minute on 2 cores)."""
    global _module
    if _module is not None:
        return _module
    from torch.utils import cpp_extension

    build_dir = _build_dir()
    if not any(build_dir.glob("*.so")):
        print(
            "hf_neuron: building the simulated Neuron device extension (once per torch version; ~1 min)...",
            file=sys.stderr,
            flush=True,
        )
    _module = cpp_extension.load(
        name="hf_neuron_simulator_C",
        sources=[str(_CSRC / s) for s in _SOURCES],
        extra_cflags=["-O2"],
        build_directory=str(build_dir),
        verbose=os.environ.get("HF_NEURON_BUILD_VERBOSE") == "1",
    )
    return _module
