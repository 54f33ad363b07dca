"""Activation checkpointing that compiles on a Neuron device.

Under ``torch.compile``, activation checkpointing (``gradient_checkpointing=True``, TRL's default)
recomputes each checkpointed region in the backward graph. A random op in the region must draw the
same numbers again, so AOTAutograd saves the RNG state before it and replays it for the recompute,
through operators implemented only for CPU, CUDA, XPU, HPU and the device types registered as
"graphsafe RNG". On a ``neuron`` device that fails at the first training step (``Backend not
supported for neuron``, or a symbolic-size RNG state that the Neuron compiler rejects as a dynamic
shape). Every scaled-dot-product-attention kernel is tagged random (for its dropout), so every
attention model hits it where torch counts a kernel called with ``dropout_p=0`` as random too; torch
releases whose partitioner rules those out (2.14) recompute them without RNG state, and only models
with dropout (in attention or elsewhere in a checkpointed layer) hit it.

The fix keeps checkpointing and makes it *save* the outputs of random ops instead of recomputing
them (a selective-checkpointing policy, ``torch.utils.checkpoint.create_selective_checkpoint_contexts``).
Nothing random is replayed, the numbers are the ones of the forward pass, and the cost is one output
per random op and layer of device memory (saving attention is also what makes selective checkpointing
faster). Attention without dropout is saved only where the device's compiled checkpointing cannot
recompute it (probed, as the rest, at first use).
"""

from __future__ import annotations

import inspect
import logging

import torch

from hf_neuron.patching import APPLIED, CLOSED, fix, mark_unknown, set_status, wrap

logger = logging.getLogger("hf_neuron")

FIX_NAME = "checkpointing-saves-random-ops"
HOOKS_FIX = "input-grad-hooks-not-stacked"
KWARGS = "activation_checkpointing_kwargs"

# Outcome of the backend probe, per device type: True = the backend cannot replay RNG state and
# saving random ops works; False = nothing to do; None = the probe could not tell.
_backend_needs_fix: dict[str, bool | None] = {}
# Per device type where the fix is needed: whether its compiled checkpointing recomputes attention
# called without dropout as it is (torch does not count that kernel as random).
_recomputes_attention_without_dropout: dict[str, bool] = {}


def _dropout_p(op, args, kwargs):
    """The ``dropout_p`` an attention kernel is called with; None for an op without that argument."""
    schema = getattr(op, "_schema", None)
    for index, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name == "dropout_p":
            return args[index] if len(args) > index else kwargs.get("dropout_p", argument.default_value)
    return None


def _attention_recomputed_as_is(op, args, kwargs) -> bool:
    """Attention without dropout, on a device whose compiled checkpointing recomputes it as it is."""
    if _dropout_p(op, args, kwargs) != 0.0:
        return False
    device = next((arg.device for arg in args if isinstance(arg, torch.Tensor)), None)
    return device is not None and _recomputes_attention_without_dropout.get(device.type, False)


def save_random_ops_policy(ctx, op, *args, **kwargs):
    """Selective-checkpointing policy: keep the outputs of random ops, recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    random = torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())
    if random and not _attention_recomputed_as_is(op, args, kwargs):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def save_random_ops_context():
    """The ``context_fn`` given to ``torch.utils.checkpoint.checkpoint`` on Neuron."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(save_random_ops_policy)


def _dropout(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) * 2


def _attention_without_dropout(x):
    query = x.view(1, 1, 2, 4)
    return torch.nn.functional.scaled_dot_product_attention(query, query, query, dropout_p=0.0) * 2


def _compile_checkpointed(device: torch.device, region, context_fn=None) -> None:
    """Compile and run forward and backward of a checkpointed ``region`` (of 8 numbers) on ``device``.

    The graphs are run as traced (no device compiler): what is exercised is AOTAutograd's treatment
    of a random op inside a checkpointed region, which is where the Neuron gap is.
    """
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch.utils.checkpoint import checkpoint

    def run_as_traced(graph_module, example_inputs):
        return make_boxed_func(graph_module.forward)

    backend = aot_autograd(fw_compiler=run_as_traced, bw_compiler=run_as_traced)
    extra = {} if context_fn is None else {"context_fn": context_fn}

    def step(x):
        return checkpoint(region, x, use_reentrant=False, **extra)

    x = torch.ones(8, device=device, requires_grad=True)
    with torch.random.fork_rng(devices=[device], device_type=device.type):
        torch.compile(step, backend=backend, fullgraph=True)(x).sum().backward()


def _compiles_as_is(device: torch.device, region) -> bool:
    try:
        _compile_checkpointed(device, region)
    except Exception:  # noqa: BLE001 - any failure: the region's ops are saved, as for every random op
        return False
    return True


def backend_needs_fix(device: torch.device) -> bool:
    """Whether compiled checkpointing of a random op fails on ``device`` and saving random ops works.

    Decided once per process, at first use (a probe touches the device, which must not happen at
    import: the Neuron runtime is initialised after ``init_process_group``). Records the fix's status.
    """
    if device.type in _backend_needs_fix:
        return bool(_backend_needs_fix[device.type])
    try:
        _compile_checkpointed(device, _dropout)
    except Exception as plain_failure:
        try:
            _compile_checkpointed(device, _dropout, save_random_ops_context)
        except Exception as exc:
            _backend_needs_fix[device.type] = None
            mark_unknown(FIX_NAME, f"the {device.type} checkpointing probe", exc)
            return False
        _backend_needs_fix[device.type] = True
        recomputed = _compiles_as_is(device, _attention_without_dropout)
        _recomputes_attention_without_dropout[device.type] = recomputed
        failure = repr(plain_failure)[:120]
        attention = "recomputed, as upstream does" if recomputed else "saved too"
        set_status(FIX_NAME, APPLIED, f"applied: compiled checkpointing on {device.type} fails ({failure}); "
                                      f"attention without dropout is {attention}")
        return True
    _backend_needs_fix[device.type] = False
    set_status(FIX_NAME, CLOSED, f"the {device.type} backend replays RNG state in compiled checkpointing")
    return False


def _device_of(model) -> torch.device | None:
    for parameter in model.parameters():
        return parameter.device
    return None


def _save_random_ops_on_neuron(original, self, *args, **kwargs):
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    user_kwargs = bound.arguments.get(KWARGS)
    device = _device_of(self)
    if (
        device is None
        or device.type != "neuron"
        or "context_fn" in (user_kwargs or {})  # the user's own policy wins
        or (user_kwargs or {}).get("use_reentrant")  # reentrant checkpointing has no policies
        or not backend_needs_fix(device)
    ):
        return original(self, *args, **kwargs)
    bound.arguments[KWARGS] = {"use_reentrant": False, **(user_kwargs or {}), "context_fn": save_random_ops_context}
    logger.info("hf_neuron: activation checkpointing on %s saves random ops (attention), not recomputes them", device)
    return original(*bound.args, **bound.kwargs)


def _checkpointing_takes_kwargs() -> bool:
    from transformers.modeling_utils import PreTrainedModel

    enable = getattr(PreTrainedModel, "activation_checkpointing_enable", None)
    if enable is None or KWARGS not in inspect.signature(enable).parameters:
        raise RuntimeError(f"PreTrainedModel.activation_checkpointing_enable({KWARGS}=...) not found")
    # Whether the device's backend needs the fix is decided at first use on a neuron model.
    return True


@fix(FIX_NAME, "transformers", _checkpointing_takes_kwargs, waits_for="transformers.modeling_utils")
def patch_activation_checkpointing() -> None:
    """Compiled training with activation checkpointing fails on Neuron: AOTAutograd cannot replay the RNG
    state of a recomputed random op (a dropout; every attention kernel, on torch releases that count one
    called without dropout as random) on a neuron device.

    Detected at the first ``activation_checkpointing_enable`` of a model on neuron (also reached from
    ``gradient_checkpointing_enable`` and the Trainer), by compiling a checkpointed dropout on the
    device with and without the remedy, and a checkpointed attention without dropout as it is. Patch:
    checkpointing saves the outputs of random ops instead of recomputing them (attention without
    dropout only where it does not compile as it is), unless the user passes a ``context_fn`` or
    ``use_reentrant=True``.
    """
    from transformers.modeling_utils import PreTrainedModel

    wrap(FIX_NAME, PreTrainedModel, "activation_checkpointing_enable", _save_random_ops_on_neuron)
    set_status(FIX_NAME, APPLIED, "applied; whether the neuron backend needs it is probed at first use")



def _remove_previous_hooks(original, self, *args, **kwargs):
    self.disable_input_require_grads()
    return original(self, *args, **kwargs)


def _hooks_stack_up() -> bool:
    import torch
    from transformers import PreTrainedConfig
    from transformers.modeling_utils import PreTrainedModel

    class Probe(PreTrainedModel):
        config_class = PreTrainedConfig

        def __init__(self, config):
            super().__init__(config)
            self.embed = torch.nn.Embedding(2, 2)

        def get_input_embeddings(self):
            return self.embed

    probe = Probe(PreTrainedConfig())
    probe.enable_input_require_grads()
    probe.enable_input_require_grads()
    return len(probe.embed._forward_hooks) > 1


@fix(HOOKS_FIX, "transformers", _hooks_stack_up, waits_for="transformers.modeling_utils")
def patch_input_require_grads() -> None:
    """Each activation-checkpointing enable adds one more forward hook on the input embeddings and keeps
    the old ones. Trainers that switch checkpointing off and on around generation (TRL's GRPO, RLOO) add
    one per step, and a compiled forward recompiles on the hook count at every step until Dynamo gives up.

    Detected by enabling input gradients twice on a small model and counting the embedding's hooks.
    Patch: ``enable_input_require_grads`` removes the hooks it registered before adding its own.
    """
    from transformers.modeling_utils import PreTrainedModel

    wrap(HOOKS_FIX, PreTrainedModel, "enable_input_require_grads", _remove_previous_hooks)
