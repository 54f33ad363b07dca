"""Whether something is on a neuron device: one answer for every adapter, never raising.

The adapters ask this inside upstream code paths (a Trainer's dataloader, ``generate``, a config's
``__post_init__``); a probe that raised there would break the user's run, so each helper answers
False (or None) when it cannot tell.
"""

from __future__ import annotations

from typing import Any

import torch


def is_neuron(device: Any) -> bool:
    """``torch.device("neuron"[, i])`` or a ``"neuron"`` / ``"neuron:i"`` string."""
    if isinstance(device, torch.device):
        return device.type == "neuron"
    return isinstance(device, str) and device.split(":")[0] == "neuron"


def model_on_neuron(model: Any) -> bool:
    """Whether a model's ``device`` (its first parameter's, for Transformers models) is a neuron device."""
    return isinstance(getattr(model, "device", None), torch.device) and model.device.type == "neuron"


def training_device_type(args: Any) -> str | None:
    """The device type a ``TrainingArguments`` trains on (None when it cannot be told)."""
    try:
        return args.device.type
    except Exception:  # resolving the device can fail on a half-built config: never break the user's
        return None


def trains_on_neuron(args: Any) -> bool:
    return training_device_type(args) == "neuron"
