"""Loading a saved PEFT adapter where the device is a Neuron device.

PEFT reads an adapter's weights (``load_peft_weights``: under ``PeftModel.from_pretrained``,
``load_adapter``, hot-swapping and X-LoRA) straight onto a device, the one the caller gives or the
machine's accelerator (``infer_device``; from PEFT 0.22 it asks ``torch.accelerator``, which answers
``neuron`` on Trainium). It hands that device to safetensors' ``load_file``, which knows a fixed list of
device types and refuses ``neuron`` ("device neuron is invalid"). On a Neuron machine, with PEFT 0.22, no
saved adapter loads, not even onto a model on the host.

The fix ``peft.adapter_weights_through_host`` reads the file on the host and moves each tensor to the
Neuron device asked for (the tensors PEFT returns are where it promised them); any other device reaches
safetensors unchanged. It wraps the ``safe_load_file`` that ``peft.utils.save_and_load`` calls, which every
caller of ``load_peft_weights`` goes through, however it imported that function.
"""

from __future__ import annotations

import os
import sys
import tempfile

from hf_neuron.devices import is_neuron
from hf_neuron.patching import PENDING, fix, wrap

FIX_NAME = "peft.adapter_weights_through_host"
MODULE = "peft.utils.save_and_load"
ATTRIBUTE = "safe_load_file"


def load_through_host(original_load, filename, device="cpu"):
    """safetensors' ``load_file`` that reads a file for a Neuron device on the host first."""
    if not is_neuron(device):
        return original_load(filename, device=device)
    return {name: tensor.to(device) for name, tensor in original_load(filename, device="cpu").items()}


def safetensors_refuses_neuron() -> bool:
    """Whether safetensors refuses to read a file for the ``neuron`` device. Asked by opening a
    one-element file for it and reading nothing: no tensor is created on the device (on Trainium, a first
    tensor starts the Neuron runtime, after which ``init_process_group`` is refused)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "probe.safetensors")
        save_file({"probe": torch.ones(1)}, path)
        try:
            with safe_open(path, framework="pt", device="neuron"):
                pass
        except Exception:  # noqa: BLE001 - refused, whatever the error says
            return True
    return False


def _gap():
    module = sys.modules.get(MODULE)
    if module is None:
        return PENDING
    if not callable(getattr(module, ATTRIBUTE, None)):
        raise RuntimeError(f"{MODULE} has no {ATTRIBUTE}: this PEFT release reads adapter files another way")
    return safetensors_refuses_neuron()


@fix(FIX_NAME, "peft", _gap, waits_for=MODULE)
def install_adapter_weights_through_host() -> None:
    """PEFT reads a saved adapter's weights straight onto the device (from PEFT 0.22 the machine's
    accelerator, `neuron` on Trainium), and safetensors refuses a `neuron` device: no saved adapter loads
    on a Neuron machine. hf_neuron reads the file on the host and moves the tensors to the Neuron device.

    Detected by opening a one-element safetensors file for `neuron` (refused: the gap exists; nothing is
    read onto the device), and it needs `peft.utils.save_and_load.safe_load_file` (the name PEFT's loader
    calls) to be there.
    """
    wrap(FIX_NAME, sys.modules[MODULE], ATTRIBUTE, load_through_host)
