"""Programs this process has already compiled, kept loaded: a graph compiled again is not lowered again.

A process often hands the backend the same graph twice: ``torch._dynamo.reset()``, a second model of the
same architecture and shapes, ``generate`` called again after Dynamo's cache was cleared. TorchNeuron then
finds the compiled program in its cache and loads it; the simulated compiler, whose "compilation" is
AOTAutograd's trace of the graph, would trace it again. This module keeps the callable AOTAutograd
returned for an *inference* graph (grad mode off: AOTAutograd compiles no backward, nothing later),
keyed by everything that decides what that callable does:

- the graph's code, device index included, and every function it calls (the key holds them: no other
  function can take their place while it is kept);
- each input's type, shape, strides, storage offset, dtype, device, whether it is a view and which
  earlier input shares its storage (AOTAutograd's handling of mutated and aliased inputs follows them);
- the values of the tensors the graph holds as constants, the compiler flags, and the global state the
  trace bakes in: grad and inference mode, autocast, the default dtype.

A graph that holds anything else (a submodule with its own parameters, a nested graph of a higher-order
op) or takes a tensor subclass (a DTensor) is compiled every time. What the backend records for a graph
(the graph log, the persistent cache's hit or miss) does not change: only the lowering is skipped.
``HF_NEURON_SIM_RELOWER=1`` turns the reuse off.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Hashable
from typing import Any

RELOWER_ENV = "HF_NEURON_SIM_RELOWER"
#: Programs kept per process (the least recently used go first); a tiny model's graph is a few kB.
CAPACITY = 256

_programs: collections.OrderedDict[tuple, tuple[Callable, dict[str, Any]]] = collections.OrderedDict()


def enabled() -> bool:
    return os.environ.get(RELOWER_ENV, "0") != "1"


def _input_entry(x, storages: dict) -> tuple | None:
    import torch

    if isinstance(x, torch.Tensor):
        if type(x) not in (torch.Tensor, torch.nn.Parameter):
            return None
        storage = x.untyped_storage().data_ptr() if x.device.type != "meta" else id(x)
        shared = storages.setdefault(storage, len(storages))
        return ("tensor", type(x).__name__, tuple(x.shape), tuple(x.stride()), x.storage_offset(), str(x.dtype),
                str(x.device), x.requires_grad, x._is_view(), shared)
    if isinstance(x, (int, float, bool, str)) or x is None:
        return (type(x).__name__, x)
    return None


def key(gm, example_inputs, constants: list, flags: dict) -> tuple | None:
    """The key of an inference graph whose compiled program can be reused, or None."""
    import torch

    if torch.is_grad_enabled() or not enabled():
        return None
    targets = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            return None
        if node.op == "get_attr" and not isinstance(getattr(gm, str(node.target), None), torch.Tensor):
            return None
        if node.op == "call_function":
            if not isinstance(node.target, Hashable):
                return None
            targets.append(node.target)
    storages: dict = {}
    inputs = []
    for x in example_inputs:
        entry = _input_entry(x, storages)
        if entry is None:  # a tensor subclass, or an input the key cannot describe
            return None
        inputs.append(entry)
    return (gm.code, tuple(targets), tuple(inputs), repr(constants), repr(sorted(flags.items())),
            _ambient_state())


def _ambient_state() -> tuple:
    """Global state AOTAutograd traces into the program without the graph's code showing it."""
    import torch

    autocast = tuple((device, torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)))
                     for device in ("cpu", "neuron"))
    return (torch.is_inference_mode_enabled(), str(torch.get_default_dtype()), autocast,
            torch.is_autocast_cache_enabled())


def lookup(program_key: tuple | None) -> tuple[Callable, dict[str, Any]] | None:
    """``(compiled callable, the fields recorded when it was compiled)``, or None."""
    if program_key is None or program_key not in _programs:
        return None
    _programs.move_to_end(program_key)
    return _programs[program_key]


def keep(program_key: tuple | None, compiled: Callable, fields: dict[str, Any]) -> None:
    """Keep ``compiled`` under ``program_key`` with the graph-log ``fields`` its compile recorded."""
    if program_key is None:
        return
    _programs[program_key] = (compiled, dict(fields))
    _programs.move_to_end(program_key)
    while len(_programs) > CAPACITY:
        _programs.popitem(last=False)


def clear() -> None:
    _programs.clear()
