"""Models on Neuron with Hugging Face's ``kernels`` package installed, as Transformers 5.25 requires it.

The hub has no kernels for Neuron devices, so on a neuron host nothing the package does selects a
kernel; two of its hooks into Transformers still change what runs, and each is left out there, as
Transformers leaves them out when ``kernels`` is not installed:

- ``load-without-hub-kernels``: ``from_pretrained`` kernelizes every model it loads
  (``use_kernels`` now defaults to True). With no kernel for the device, each layer that could take
  one (RMSNorm, MLP and mixer classes) gets its class's ``forward`` back, dropping a ``forward`` set on
  the module after it was built: the forwards tensor-parallel styles install (BitNet's sharded norm
  under ``DistributedConfig(tp_size=2)`` then mixes a DTensor weight with plain activations).
- ``kernel-routing-outside-checkpointed-layers``: every attention class decorated
  ``@use_kernelized_func(apply_rotary_pos_emb)`` (Llama, Qwen3, Mistral and most others) gets a
  ``forward`` wrapper that routes the rotary function to a per-model kernel: on each call it sets a
  module-level context variable, calls the real forward and resets it. Under ``torch.compile`` that is
  a write to state outside the traced function. Activation checkpointing, which TRL's SFT turns on by
  default, traces each decoder layer as a higher-order operator that refuses such writes: Dynamo breaks
  the graph, cannot resume inside the operator, and runs every checkpointed layer eagerly. A Llama
  training step then compiles 7 graphs instead of 3 and runs its layers op by op; on Neuron each eager
  op is a device dispatch.
"""

from __future__ import annotations

from hf_neuron.patching import fix, replace, wrap

ROUTING_FIX = "kernel-routing-outside-checkpointed-layers"
LOAD_FIX = "load-without-hub-kernels"

HUB_KERNELS_MODULE = "transformers.integrations.hub_kernels"
MODELING_MODULE = "transformers.modeling_utils"


def _without_kernels_unless_asked(original_fn, cls, *args, **kwargs):
    if "use_kernels" not in kwargs and kwargs.get("kernel_config") is None:  # a kernel config asks for kernels
        kwargs["use_kernels"] = False
    return original_fn(cls, *args, **kwargs)


def _load_kernelizes_by_default() -> bool:
    """Load a two-parameter probe model from a state dict with upstream's defaults and see whether it is
    asked to use kernels (on a subclass of the probe's own: nothing upstream is touched)."""
    import torch
    import transformers.utils.logging as hf_logging
    from transformers import PretrainedConfig, PreTrainedModel

    class ProbeConfig(PretrainedConfig):
        model_type = "hf_neuron_probe"

    class Probe(PreTrainedModel):
        config_class = ProbeConfig
        asked = []

        def __init__(self, config):
            super().__init__(config)
            self.linear = torch.nn.Linear(2, 2)
            self.post_init()

        def set_use_kernels(self, use_kernels, *args, **kwargs):
            Probe.asked.append(use_kernels)

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        Probe.from_pretrained(None, config=ProbeConfig(), state_dict=Probe(ProbeConfig()).state_dict())
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if len(Probe.asked) != 1:
        raise RuntimeError(f"from_pretrained asked the probe to use kernels {len(Probe.asked)} times, not once")
    return bool(Probe.asked[0])


@fix(LOAD_FIX, "transformers", _load_kernelizes_by_default, waits_for=MODELING_MODULE)
def patch_load_without_hub_kernels() -> None:
    """``from_pretrained`` kernelizes every model by default, undoing the forwards that tensor-parallel
    styles set on their modules.

    Gap: Transformers 5.25 loads with ``use_kernels=True`` unless told otherwise; with no hub kernel for
    the device, kernelizing hands every kernel-capable layer its class's ``forward`` again, and the
    forward a tensor-parallel style installed on such a layer is gone (BitNet under TP fails).
    Detected by loading a probe model from a state dict and seeing what it is asked. Patch: on a neuron
    host ``from_pretrained`` defaults to ``use_kernels=False``, as before 5.25; ``use_kernels=True``
    (or a ``kernel_config``) you pass wins.
    """
    from transformers.modeling_utils import PreTrainedModel

    wrap(LOAD_FIX, PreTrainedModel, "from_pretrained", _without_kernels_unless_asked)


def _classes_unchanged(*kernel_functions):
    """``use_kernelized_func`` as Transformers defines it without the ``kernels`` package."""

    def decorator(cls):
        return cls

    return decorator


def _probe_kernel_function(hub_kernels):
    """A function decorated as the installed release's modeling code decorates its rotary function."""

    def probe(x):
        return x

    # Transformers 5.25 decorates functions with `use_kernel_forward_from_hub`; earlier releases with
    # `use_kernel_func_from_hub` (which 5.25 removed).
    decorate = getattr(hub_kernels, "use_kernel_func_from_hub", None) or hub_kernels.use_kernel_forward_from_hub
    return decorate("hf_neuron_probe")(probe)


def _attention_forward_is_wrapped() -> bool:
    import torch
    import transformers.integrations.hub_kernels as hub_kernels

    class Probe(torch.nn.Module):
        def forward(self, x):
            return x

    defined = Probe.forward
    decorated = hub_kernels.use_kernelized_func(_probe_kernel_function(hub_kernels))(Probe)
    return decorated.forward is not defined


@fix(ROUTING_FIX, "transformers", _attention_forward_is_wrapped, waits_for=HUB_KERNELS_MODULE)
def patch_kernelized_classes() -> None:
    """With ``kernels`` installed, checkpointed decoder layers fall back to eager in compiled training.

    Gap: ``@use_kernelized_func`` wraps each attention class's ``forward`` in a call that writes a
    context variable; activation checkpointing under ``torch.compile`` refuses the write, so every
    checkpointed layer runs eagerly (a Llama SFT step: 7 graphs instead of 3). Detected by
    decorating a probe module with upstream's ``use_kernelized_func`` and finding its ``forward``
    replaced. Patch: on a neuron host, where the hub has no kernel to route to, the decorator leaves
    classes as defined (upstream's own behaviour without ``kernels``); applied when Transformers'
    kernel integration is imported, before any modeling module defines its classes.
    """
    import transformers.integrations.hub_kernels as hub_kernels

    replace(ROUTING_FIX, hub_kernels, "use_kernelized_func", _classes_unchanged)
