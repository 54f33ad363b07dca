"""The simulated compiler's persistent cache of compiled graphs, as TorchNeuron keeps its NEFFs on disk.

On Trainium a graph's first compile is a neuronx-cc run of minutes; TorchNeuron stores the compiled
program (the NEFF) under ``TORCH_NEURONX_NEFF_CACHE_DIR`` and a later process handed the same graph
loads it instead of compiling. The simulator does the same so that cold and warm starts can be told
apart and tested: each graph the ``"neuron"`` backend accepts is keyed by a stable hash of

- the Dynamo graph's code (without the NeuronCore index: every rank shares an entry) and its
  constant tensors,
- every input's shape, stride, dtype and ``requires_grad``, and whether autograd is on,
- the compiler settings (``mode``, ``NEURON_CC_FLAGS``, complex decomposition),
- the versions that change compiled code (torch, torch-neuronx, hf_neuron),

and its entry (one file, ``<key>.neff``) holds what the simulated compiler produced: the graph's
code, inputs and ATen ops, with a checksum. The graph log records ``cache: "hit"`` or ``"miss"`` for
every graph. Entries are written atomically (a private temporary file renamed into place), so every
rank of a torchrun job may write the same entry at once; a corrupt or truncated entry is reported
with a warning and compiled again, never raised.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEBUG_DIR_ENV = "TORCH_NEURONX_DEBUG_DIR"
CC_FLAGS_ENV = "NEURON_CC_FLAGS"
#: Whether the compiler decomposes complex ops into real ones (TorchNeuron's setting; on by default).
COMPLEX_DECOMPOSE_ENV = "TORCH_NEURONX_COMPLEX_DECOMPOSE"
#: TorchNeuron's documented default for its artifacts directory; the simulator keeps its cache inside.
DEFAULT_DEBUG_DIR = "/tmp/neuron_backend"
ENTRY_SUFFIX = ".neff"
#: Bumped when the key or the entry layout changes: older entries are then misses, never misread.
FORMAT = 1

HIT = "hit"
MISS = "miss"


def cache_dir() -> Path:
    """``$TORCH_NEURONX_NEFF_CACHE_DIR``, else ``$TORCH_NEURONX_DEBUG_DIR/neff_cache`` (``/tmp/neuron_backend``)."""
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get(DEBUG_DIR_ENV, "").strip() or DEFAULT_DEBUG_DIR).expanduser() / "neff_cache"


def versions() -> dict[str, str]:
    """The versions baked into every key: a cache made by other releases is all misses."""
    import torch

    from hf_neuron import __version__
    from hf_neuron.simulator.torch_neuronx_shim import SIMULATED_VERSION

    return {"torch": torch.__version__, "torch_neuronx": SIMULATED_VERSION, "hf_neuron": __version__}


def compiler_flags(mode: str | None) -> dict[str, str]:
    return {
        "mode": mode or "default",
        CC_FLAGS_ENV: os.environ.get(CC_FLAGS_ENV, ""),
        COMPLEX_DECOMPOSE_ENV: os.environ.get(COMPLEX_DECOMPOSE_ENV, "1"),
    }


def _describe_input(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape), list(value.stride()), str(value.dtype), bool(value.requires_grad)]
    if isinstance(value, (int, float, bool, str)) or value is None:
        return [type(value).__name__, value]
    return [type(value).__name__]


def constants(gm) -> list:
    """Tensors the graph holds as attributes (values included: they are baked into the program)."""
    import torch

    out = []
    for node in gm.graph.find_nodes(op="get_attr"):
        value = getattr(gm, str(node.target), None)
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            out.append([str(node.target), _describe_input(value), hashlib.sha256(data).hexdigest()])
    return out


_DEVICE_INDEX = re.compile(r"(device\(type='neuron'), index=\d+\)|'neuron:\d+'")


def portable_code(gm) -> str:
    """The graph's code without the NeuronCore index: one compiled program serves every core (rank)."""
    return _DEVICE_INDEX.sub(lambda m: f"{m.group(1)})" if m.group(1) else "'neuron'", gm.code)


def graph_key(code: str, example_inputs, graph_constants: list, flags: dict[str, str]) -> str:
    """The stable hash that names a graph's entry (same graph, inputs, flags and versions: same key);
    ``code`` is the graph's :func:`portable_code`, ``graph_constants`` its :func:`constants` and ``flags``
    the :func:`compiler_flags`."""
    import torch

    material = {
        "format": FORMAT,
        "code": code,
        "inputs": [_describe_input(x) for x in example_inputs],
        "constants": graph_constants,
        "grad": torch.is_grad_enabled(),
        "flags": flags,
        "versions": versions(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def entry_path(key: str, directory: Path | None = None) -> Path:
    return (directory or cache_dir()) / f"{key}{ENTRY_SUFFIX}"


def _warn_corrupt(path: Path, why: str) -> None:
    warnings.warn(
        f"hf_neuron simulator: compiled-graph cache entry {path} is unreadable ({why}); compiling the graph "
        f"again and replacing the entry.",
        UserWarning,
        stacklevel=4,
    )


def read_entry(path: Path) -> dict[str, Any] | None:
    """The entry's body, or None when it is missing; a corrupt entry warns and counts as missing."""
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        _warn_corrupt(path, f"{type(e).__name__}: {e}")
        return None
    try:
        entry = json.loads(raw)
        body, checksum = entry["body"], entry["checksum"]
    except (ValueError, TypeError, KeyError) as e:
        _warn_corrupt(path, f"not a complete entry: {type(e).__name__}")
        return None
    if _checksum(body) != checksum:
        _warn_corrupt(path, "checksum mismatch")
        return None
    return body


def lookup(key: str, code: str) -> dict[str, Any] | None:
    """The entry compiled for ``key`` (and this exact graph code), or None: compile it."""
    path = entry_path(key)
    body = read_entry(path)
    if body is None:
        return None
    if body.get("key") != key or body.get("code") != code:
        _warn_corrupt(path, "it holds another graph")
        return None
    return body


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def store(key: str, code: str, **fields: Any) -> Path:
    """Write the entry of a freshly compiled graph (called by the backend after a miss)."""
    body = {"key": key, "code": code, "versions": versions(), **fields}
    path = entry_path(key)
    try:
        write_atomically(path, json.dumps({"body": body, "checksum": _checksum(body)}, sort_keys=True).encode())
    except OSError as e:  # a read-only or full cache directory must not fail the user's compile
        warnings.warn(f"hf_neuron simulator: cannot write compiled-graph cache entry {path}: {e}", UserWarning,
                      stacklevel=3)
    return path


def entries(directory: Path | None = None) -> list[Path]:
    """The cache's entry files, sorted (temporary files of writers in progress are not entries)."""
    directory = directory or cache_dir()
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.endswith(ENTRY_SUFFIX) and not p.name.startswith("."))
