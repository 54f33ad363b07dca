"""Installing the simulated device into this process's torch."""

from __future__ import annotations

import os
import warnings

import torch

from hf_neuron.simulator import _extension, config, device_module, torch_neuronx_shim

_installed = False


# Composite ops whose ATen implementation allocates its output in the input's *suggested* memory
# format (channels_last for some permuted 4-D inputs). That internal choice is not the user asking
# for channels_last, so these run as the CPU composite on CPU views instead of tripping the check.
_COMPOSITES_ON_CPU = ["aten::constant_pad_nd"]


def _ops_needing_cpu_path() -> list[str]:
    """aten ops that have a CPU kernel *and* a composite one.

    With only a boxed fallback, the dispatcher gives PrivateUse1 the composite kernel of such ops
    (layer norm, for one), which differs from the CPU kernel in the last bits. We route them to the
    CPU kernel explicitly so results are bit-identical to CPU.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not has(name, "CPU"):
            continue
        if has(name, "CompositeExplicitAutograd") or has(name, "CompositeExplicitAutogradNonFunctional"):
            names.append(name)
    return names + _COMPOSITES_ON_CPU


def install() -> None:
    global _installed
    if _installed:
        return
    host = config.host_from_env()
    C = _extension.load()

    torch.utils.rename_privateuse1_backend("neuron")
    C.configure(host.device_count, host.bytes_per_device)
    C.set_strict_dtypes(config.strict_dtypes_from_env())
    device_module._host = host
    torch._register_device_module("neuron", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    C.register_cpu_path(_ops_needing_cpu_path())
    torch_neuronx_shim.install_finder()
    _install_cpu_only_warnings()
    _quiet_tensor_printing(C)
    _register_process_group_backend()

    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if host.device_count:
        device_module.set_device(min(local_rank, host.device_count - 1))
    _installed = True


def _register_process_group_backend() -> None:
    """`init_process_group(backend="neuron")`; registering is cheap, the backend builds on first use."""
    from hf_neuron.simulator import distributed

    distributed.register()


def _quiet_tensor_printing(C) -> None:
    """Printing a tensor formats it through float64; on neuron that must not warn (or raise in strict mode)."""
    import torch._tensor_str as tensor_str

    from hf_neuron.patching import wrap

    def _str(original, self, *, tensor_contents=None):
        if self.device.type != "neuron":
            return original(self, tensor_contents=tensor_contents)
        C.set_quiet(True)
        try:
            return original(self, tensor_contents=tensor_contents)
        finally:
            C.set_quiet(False)

    wrap("simulator.quiet_tensor_printing", tensor_str, "_str", _str)


def _warn_runs_on_cpu(feature: str) -> None:
    warnings.warn(
        f"{feature} has no Neuron kernels: on Trainium it runs on the CPU. The simulator runs it as usual.",
        stacklevel=4,  # the caller of the patched function
    )


def _install_cpu_only_warnings() -> None:
    """Warn once where TorchNeuron has no kernels (forward-mode AD, nested tensors) for neuron inputs."""
    import torch.autograd.forward_ad as fwad

    from hf_neuron.patching import wrap as patch

    warned: set[str] = set()

    def wrap(owner, attr: str, feature: str, is_neuron):
        def warn_first(original, *args, **kwargs):
            if feature not in warned and is_neuron(*args, **kwargs):
                warned.add(feature)
                _warn_runs_on_cpu(feature)
            return original(*args, **kwargs)

        patch("simulator.cpu_only_warnings", owner, attr, warn_first)

    def first_tensor_on_neuron(tensor, *a, **k):
        return isinstance(tensor, torch.Tensor) and tensor.device.type == "neuron"

    def nested_on_neuron(tensors, *a, device=None, **k):
        if device is not None and torch.device(device).type == "neuron":
            return True
        return any(isinstance(t, torch.Tensor) and t.device.type == "neuron" for t in tensors)

    wrap(fwad, "make_dual", "Forward-mode AD", first_tensor_on_neuron)
    wrap(torch.nested, "nested_tensor", "A nested tensor", nested_on_neuron)
    wrap(torch.nested, "as_nested_tensor", "A nested tensor", nested_on_neuron)
