"""Transformers adapter: unchanged Transformers code runs well on a neuron device.

``register()`` declares the fixes; ``hf_neuron.adapters`` applies them when ``transformers`` is
imported. Each adaptation is a named fix (``hf-neuron env`` lists them); it is applied when the
Transformers submodule it patches is imported. ``HF_NEURON_DISABLE=1`` applies none.

The fixes are grouped by what they are for, one folder each (every module in them that declares a fix
is found by :func:`register`, no list to keep):

- :mod:`.generation`: ``generate`` compiles one graph per prefill bucket plus one decode graph per
  (batch size, ``max_cache_len``), with Neuron's defaults filled in.
- :mod:`.tensor_parallel`: ``DistributedConfig(tp_size=N)`` loads, generates and trains on Neuron.
- :mod:`.training`: the ``Trainer`` trains and evaluates compiled on Neuron.
- :mod:`.loading`: ``device_map`` on neuron devices, synchronous loading, processors.
- :mod:`.models`: fixes for one architecture, ``models/<model_type>.py``.

And the tools: :mod:`.plan` (the graphs and device memory a workload will need, predicted before
anything compiles) and :func:`warmup` (generation's graphs compiled before traffic).
"""

from __future__ import annotations

import importlib

from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers.generation.defaults import (
    DEFAULT_MAX_CACHE_LEN,
    DEFAULT_PREFILL_BUCKETS,
    DEFAULT_PREFILL_CHUNK_SIZE,
    resolve_prefill_buckets,
    resolve_prefill_chunk_size,
)
from hf_neuron.transformers.generation.tokenization import generation_padding_kwargs, tokenize_chats, tokenize_prompts
from hf_neuron.transformers.generation.warmup import WarmupReport, warmup

#: The folders whose modules declare fixes (importing them imports no Transformers submodule).
FIX_PACKAGES = ("generation", "tensor_parallel", "training", "loading", "models")


def fix_modules() -> list[str]:
    """Every module of :data:`FIX_PACKAGES`, by dotted name (a leading underscore marks a helper that
    the modules beside it import)."""
    import pkgutil

    names = []
    for package in FIX_PACKAGES:
        module = importlib.import_module(f"{__name__}.{package}")
        names += [f"{module.__name__}.{info.name}" for info in pkgutil.iter_modules(module.__path__)
                  if not info.name.startswith("_")]
    return sorted(names)


def register() -> None:
    """Declare the Transformers fixes (importing their modules imports no Transformers submodule)."""
    for name in fix_modules():
        importlib.import_module(name)


def import_fix_targets() -> None:
    """Import every Transformers submodule a fix changes, so that all fixes are decided and applied."""
    from hf_neuron.patching import import_targets

    register()
    import_targets("transformers")


__all__ = [
    "DEFAULT_MAX_CACHE_LEN",
    "DEFAULT_PREFILL_BUCKETS",
    "DEFAULT_PREFILL_CHUNK_SIZE",
    "generation_padding_kwargs",
    "import_fix_targets",
    "register",
    "resolve_prefill_buckets",
    "resolve_prefill_chunk_size",
    "tokenize_chats",
    "tokenize_prompts",
    "upstream_behaviour",
    "warmup",
    "WarmupReport",
]
