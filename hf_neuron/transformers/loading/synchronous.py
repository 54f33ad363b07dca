"""Synchronous weight loading when weights go to a Neuron device.

Transformers loads checkpoint tensors with a thread pool (``core_model_loading``); TorchNeuron does
not support it (the device of a worker thread is not the caller's; early TRL integrations exported
``HF_DEACTIVATE_ASYNC_LOAD=1`` "to avoid hanging"). Upstream reads that variable at every load, so
we set it for the duration of a load whose device map has a neuron device - unless the user set it
themselves (either way: their value wins).
"""

from __future__ import annotations

import contextlib
import os

import torch

from hf_neuron.devices import is_neuron
from hf_neuron.patching import fix, wrap

FIX_NAME = "async-load-off-on-neuron"
ENV = "HF_DEACTIVATE_ASYNC_LOAD"


def _targets_neuron(device_map) -> bool:
    if not device_map:
        return False
    for value in device_map.values():
        if is_neuron(value):
            return True
        if isinstance(value, int) and not isinstance(value, bool):
            # An integer device is the current accelerator's (torch.device(0) == neuron:0 on Trainium).
            accelerator = getattr(torch, "accelerator", None)
            current = accelerator.current_accelerator() if accelerator is not None else None
            if current is not None and current.type == "neuron":
                return True
    return False


@contextlib.contextmanager
def _sync_loading():
    os.environ[ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(ENV, None)


def _load_synchronously_on_neuron(original, model, state_dict, load_config, *args, **kwargs):
    if ENV in os.environ or not _targets_neuron(getattr(load_config, "device_map", None)):
        return original(model, state_dict, load_config, *args, **kwargs)
    with _sync_loading():
        return original(model, state_dict, load_config, *args, **kwargs)


def _loads_with_threads() -> bool:
    import inspect

    from transformers import core_model_loading

    # Upstream's switch is this environment variable; if it no longer exists there is no thread pool
    # left to turn off on our side.
    return ENV in inspect.getsource(core_model_loading) and "ThreadPoolExecutor" in inspect.getsource(
        core_model_loading
    )


@fix(FIX_NAME, "transformers", _loads_with_threads, waits_for="transformers.modeling_utils")
def patch_async_loading() -> None:
    """Weights are loaded by a thread pool, which TorchNeuron does not support.

    Gap: ``convert_and_load_state_dict_in_model`` uses a ``ThreadPoolExecutor`` unless
    ``HF_DEACTIVATE_ASYNC_LOAD`` is true, which Neuron users must know to export. Detected by the
    thread pool and its switch in ``transformers.core_model_loading``. Patch: a load whose device
    map contains a neuron device runs with ``HF_DEACTIVATE_ASYNC_LOAD=1``, unless the variable is set.
    """
    import transformers.modeling_utils as modeling_utils

    wrap(FIX_NAME, modeling_utils, "convert_and_load_state_dict_in_model", _load_synchronously_on_neuron)
