"""Mixture-of-experts models under ``DistributedConfig(tp_size=N)`` on Neuron: experts sharded, dispatched
statically, bad expert-parallel sizes refused early.

Transformers shards routed experts by *expert parallelism* (EP): ``DistributedConfig(ep_size=N)`` with the
model's ``base_model_ep_plan`` (``grouped_gemm`` parameters, an ``ep_dispatch_experts`` module). Releases
that still listed the experts in their tensor-parallel plans (``moe_tp_experts``, deprecated) shard them
with ``tp_size`` alone; newer ones leave ``ep_size`` at 1 unless asked, and every rank then holds every
expert: the bulk of an MoE checkpoint, replicated N times.

- ``moe-experts-sharded-under-tp``: on a neuron mesh, ``tp_size=N`` without an ``ep_size`` of the user's
  shards the experts over the TP group (``ep_size=N``), when the model has an EP plan and N divides its
  expert count.
- ``moe-expert-dispatch-static``: on a neuron mesh, an ``ep_implementation`` the user left at ``"auto"``
  becomes ``"neuron_static"`` (:mod:`.expert_dispatch`), whose collectives and shapes do not depend on the
  routing, in training too.
- ``ep-size-constraints``: an ``ep_size`` that the layout or the expert count cannot take fails before
  anything is allocated, naming the sizes that work.

What was chosen is said in one log line per model (rank 0, ``hf_neuron`` logger, info level).
"""

from __future__ import annotations

import dataclasses
import logging
import re

import torch

from hf_neuron.patching import fix, replace, wrap
from hf_neuron.transformers.tensor_parallel import expert_dispatch

logger = logging.getLogger("hf_neuron")

EXPERTS_FIX = "moe-experts-sharded-under-tp"
DISPATCH_FIX = "moe-expert-dispatch-static"
SIZES_FIX = "ep-size-constraints"

CONFIG_MODULE = "transformers.distributed.configuration_utils"
MIXIN_MODULE = "transformers.distributed.mixin"

#: The EP plan style of the module that reaches the experts, and of the parameters sharded by expert.
DISPATCH_STYLE = "ep_dispatch_experts"
EXPERT_PARAMETER_STYLE = "grouped_gemm"


# ------------------------------------------------------------------------------ what the user set

_USER_SET = "_hf_neuron_user_set"


def _record_user_fields(original, self, *args, **kwargs):
    """``DistributedConfig(...)``, remembering which fields the caller named (a default cannot be told
    from an explicit value once ``__post_init__`` has resolved it)."""
    names = [field.name for field in dataclasses.fields(self)]
    original(self, *args, **kwargs)
    self.__dict__[_USER_SET] = frozenset(names[:len(args)]) | frozenset(kwargs)


def user_set(distributed_config, name: str) -> bool:
    """Whether the user gave ``name`` to this ``DistributedConfig`` (a config built before hf_neuron's
    fixes were applied counts every value that differs from the default as the user's)."""
    recorded = distributed_config.__dict__.get(_USER_SET)
    if recorded is not None:
        return name in recorded
    defaults = {"ep_size": 1, "ep_plan": None, "ep_implementation": "auto"}
    return getattr(distributed_config, name) != defaults.get(name)


def _on_neuron(mesh_manager) -> bool:
    return mesh_manager is not None and mesh_manager.get_mesh("tp").device_type == "neuron"


# ------------------------------------------------------------------------------ the model's experts

def _glob(pattern: str):
    return re.compile(re.escape(pattern).replace(r"\*", r"\d+"))


def expert_counts(model) -> set[int]:
    """The expert counts of the parameters ``model``'s EP plan shards by expert (one per MoE layer kind)."""
    patterns = [_glob(name) for name, style in _ep_plan(model).items() if style == EXPERT_PARAMETER_STYLE]
    return {parameter.shape[0] for name, parameter in model.named_parameters()
            if any(pattern.fullmatch(name) for pattern in patterns)}


#: Config fields that hold a mixture-of-experts model's number of routed experts (0, 1 or None: dense).
EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
#: Config switches that turn a model's expert layers off (its expert count is then unused).
MOE_SWITCHES = ("is_moe", "enable_moe_block", "use_moe")


def routed_expert_count(config) -> int:
    """How many routed experts ``config``'s MoE layers have (0 for a dense model), read from the config
    alone (its text config, and DBRX's ``ffn_config``), so a model with no expert-parallel plan counts."""
    try:
        text = config.get_text_config()
    except (AttributeError, ValueError):  # not a PretrainedConfig, or several text configs (encoder-decoder)
        text = config
    if any(getattr(text, flag, None) is False for flag in MOE_SWITCHES):
        return 0
    for holder in (text, getattr(text, "ffn_config", None)):
        for name in EXPERT_COUNT_FIELDS:
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                return value
    return 0


def is_expert_parameter(name: str) -> bool:
    """A routed expert's weight (``...mlp.experts.gate_up_proj``, ``...experts.3.w1.weight``)."""
    return ".experts." in name


def _ep_plan(model) -> dict:
    """The model's expert-parallel plan ({} for a model or release without one)."""
    return getattr(model, "ep_plan", None) or {}


def has_expert_plan(model) -> bool:
    return DISPATCH_STYLE in _ep_plan(model).values() and bool(expert_counts(model))


def valid_ep_sizes(distributed_config, counts=()) -> list[int]:
    """EP sizes the layout takes: multiples of ``tp_size`` that divide ``fsdp_size * tp_size`` (and the
    expert counts, when given)."""
    tp, ranks = distributed_config.tp_size, distributed_config.fsdp_size * distributed_config.tp_size
    return [size for size in range(tp, ranks + 1, tp)
            if ranks % size == 0 and all(count % size == 0 for count in counts)]


# ------------------------------------------------------------------------------ experts sharded by default

def _expert_mesh(mesh_manager, distributed_config):
    """``mesh_manager`` with its expert mesh rebuilt for the config's (new) ``ep_size``."""
    from torch.distributed import init_device_mesh
    from transformers.distributed.utils import TransformersDeviceMesh

    dense = mesh_manager.get_mesh(("pp", "dp_replicate", "fsdp", "tp"))
    shape = (distributed_config.pp_size, distributed_config.dp_replicate_size, distributed_config.efsdp_size,
             distributed_config.ep_size)
    experts = init_device_mesh(dense.device_type, shape, mesh_dim_names=("pp", "dp_replicate", "efsdp", "ep"))
    return TransformersDeviceMesh(dense, experts)


def _shard_experts_over_tp(original, cls, model, distributed_config, mesh_manager):
    if (_on_neuron(mesh_manager) and distributed_config.tp_size > 1 and distributed_config.ep_size == 1
            and not user_set(distributed_config, "ep_size") and has_expert_plan(model)):
        tp = distributed_config.tp_size
        counts = expert_counts(model)
        if all(count % tp == 0 for count in counts):
            distributed_config.ep_size = tp
            distributed_config.enable_expert_parallel = True
            mesh_manager = _expert_mesh(mesh_manager, distributed_config)
            _chosen(distributed_config)["ep_size"] = f"ep_size={tp} (the TP group)"
        else:
            _chosen(distributed_config)["ep_size"] = (
                f"experts replicated on every rank: tp_size={tp} does not divide the {sorted(counts)} experts "
                f"(a tp_size that does: {_dividing(counts, 64) or 'none up to 64'})")
    model = original(cls, model, distributed_config, mesh_manager)
    _announce(model, distributed_config, mesh_manager)
    return model


def _dividing(counts, limit: int) -> str:
    return ", ".join(str(n) for n in range(2, limit + 1) if all(count % n == 0 for count in counts))


def _plan_probe(config):
    """A module tree with every name ``config``'s TP and EP plans mention (layer ``*`` as 0, parameters
    for the EP plan's expert-parameter rules), resolving its plans as a model does. Built without the
    modeling module, which may be importing when this runs."""
    from transformers.distributed.mixin import DistributedMixin

    tp_plan, ep_plan = dict(type(config).base_model_tp_plan or {}), dict(type(config).base_model_ep_plan or {})
    parameters = {name for name, style in ep_plan.items() if style == EXPERT_PARAMETER_STYLE}

    class PlanProbe(torch.nn.Module, DistributedMixin):
        def __init__(self):
            super().__init__()
            self.config = config
            for name in sorted({*tp_plan, *ep_plan}, key=lambda n: n.count(".")):
                *path, leaf = name.replace("*", "0").split(".")
                parent = self
                for part in path:
                    if not hasattr(parent, part):
                        parent.add_module(part, torch.nn.Module())
                    parent = getattr(parent, part)
                if name in parameters:
                    parent.register_parameter(leaf, torch.nn.Parameter(torch.empty(4, 1, device="meta")))
                elif not hasattr(parent, leaf):
                    parent.add_module(leaf, torch.nn.Module())
            self._tp_plan, self._ep_plan, self._fsdp_plan = tp_plan, ep_plan, {}

    return PlanProbe()


def _tp_leaves_experts_whole() -> bool:
    """Resolve Qwen3-MoE's plans for ``tp_size=2``: the gap exists when neither the TP plan nor the EP
    plan names an expert parameter."""
    from transformers import DistributedConfig
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig

    config = Qwen3MoeConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=2, head_dim=8, num_experts=4)
    tp_plan, ep_plan, _ = _plan_probe(config)._resolve_parallel_plans(DistributedConfig(tp_size=2))
    return not any(".mlp.experts." in name for name in {**tp_plan, **ep_plan})


@fix(EXPERTS_FIX, "transformers", _tp_leaves_experts_whole, waits_for=MIXIN_MODULE, layer_kind="experts")
def patch_experts_sharded_under_tp() -> None:
    """``DistributedConfig(tp_size=N)`` on a mixture-of-experts model leaves every expert on every rank.

    The routed experts left the tensor-parallel plans for the expert-parallel ones, which apply only with
    ``ep_size > 1``; ``tp_size=N`` alone now replicates the experts, the bulk of the weights, on every rank.
    Detected by resolving Qwen3-MoE's plans for ``tp_size=2``: no plan names an expert parameter.
    Patch: on a neuron mesh, with no ``ep_size`` of the user's and an expert count N divides, the experts
    are sharded over the TP group (``ep_size=N``, upstream's expert parallelism); one log line says so.
    """
    from transformers import DistributedConfig
    from transformers.distributed.mixin import DistributedMixin

    wrap(EXPERTS_FIX, DistributedConfig, "__init__", _record_user_fields)
    wrap(EXPERTS_FIX, DistributedMixin, "maybe_distribute_model", _shard_experts_over_tp)


# ------------------------------------------------------------------------------ static dispatch

def _static_dispatch(original, cls, model, distributed_config, mesh_manager):
    if (_on_neuron(mesh_manager) and distributed_config.ep_implementation == "auto"
            and not user_set(distributed_config, "ep_implementation")):
        distributed_config.ep_implementation = expert_dispatch.STATIC
        _chosen(distributed_config)["ep_implementation"] = f"ep_implementation={expert_dispatch.STATIC!r}"
    model = original(cls, model, distributed_config, mesh_manager)
    _announce(model, distributed_config, mesh_manager)
    return model


def _auto_dispatch_reads_the_routing() -> bool:
    """Run upstream's training-time dispatch (``AllToAllEP``) for two ranks with a stand-in exchange that
    records the split sizes it is handed: the gap exists when they follow the routing (two routings, two
    different split lists)."""
    import types

    from transformers.distributed import expert_parallel

    recorded = []

    def counts_exchange(output, counts, group=None, **kwargs):  # both ranks send what this one sends
        output.copy_(counts)

    def tokens_exchange(tensor, output_split_sizes, input_split_sizes, group):
        recorded.append(list(input_split_sizes))
        return tensor

    one_rank = types.SimpleNamespace(size=lambda: 1)
    two_ranks = types.SimpleNamespace(size=lambda: 2, get_group=lambda: None)
    stand_in = types.SimpleNamespace(tp_mesh=one_rank, ep_mesh=two_ranks, num_local_experts=2)
    hidden, weights = torch.zeros(4, 8), torch.full((4, 1), 1.0)
    names = ("all_to_all_single", "all_to_all_single_autograd")
    saved = {name: getattr(expert_parallel, name) for name in names}
    try:
        expert_parallel.all_to_all_single, expert_parallel.all_to_all_single_autograd = counts_exchange, tokens_exchange
        for routing in ([0, 0, 0, 2], [2, 2, 3, 3]):
            expert_parallel.AllToAllEP._dispatch_tokens(stand_in, hidden, torch.tensor(routing).view(4, 1), weights)
    finally:
        for name, value in saved.items():
            setattr(expert_parallel, name, value)
    if not recorded:
        raise RuntimeError("upstream's AllToAllEP dispatch exchanged no tokens")
    return recorded[0] != recorded[-1]


@fix(DISPATCH_FIX, "transformers", _auto_dispatch_reads_the_routing, waits_for=MIXIN_MODULE, layer_kind="experts")
def patch_static_expert_dispatch() -> None:
    """Expert parallelism trains with an all-to-all whose split sizes follow the routing.

    ``ep_implementation="auto"`` switches to ``AllToAllEP`` once gradients flow: it counts the tokens
    routed to each rank, reads the counts back to the host and exchanges uneven chunks. TorchNeuron's
    all-to-all takes even splits only, and a compiled graph cannot size a tensor by the routing. Detected
    by running upstream's dispatch for two routings with a stand-in exchange: the split sizes differ.
    Patch: ``"neuron_padded_all_to_all"`` and ``"neuron_static"`` join upstream's EP implementations, and
    on a neuron mesh an ``ep_implementation`` left at ``"auto"`` becomes ``"neuron_static"`` (all-reduce
    within a TP group, a padded all-to-all with even splits across batches).
    """
    from transformers import DistributedConfig
    from transformers.distributed.expert_parallel import EPImplementationInterface
    from transformers.distributed.mixin import DistributedMixin

    for name, implementation in expert_dispatch.build_implementations().items():
        replace(DISPATCH_FIX, EPImplementationInterface._global_mapping, name, implementation, mapping=True)
    wrap(DISPATCH_FIX, DistributedConfig, "__init__", _record_user_fields)
    wrap(DISPATCH_FIX, DistributedMixin, "maybe_distribute_model", _static_dispatch)


# ------------------------------------------------------------------------------ sizes checked early

def _config_checking_ep_size(original, self, *args, **kwargs):
    try:
        original(self, *args, **kwargs)
    except ValueError as error:
        if "ep_size" not in str(error):
            raise
        # The sizes were resolved (defaults filled in) before the layout was checked.
        tp, fsdp = self.tp_size, self.fsdp_size
        raise ValueError(
            f"ep_size={self.ep_size} does not fit tp_size={tp}, fsdp_size={fsdp}: the expert-parallel group must "
            f"be a multiple of tp_size that divides fsdp_size * tp_size = {tp * fsdp} (so no larger than those "
            f"{tp * fsdp} ranks). Valid ep_size values here: {', '.join(map(str, valid_ep_sizes(self)))}."
        ) from error


def _distribute_checking_expert_count(original, cls, model, distributed_config, mesh_manager):
    ep = distributed_config.ep_size
    if ep > 1 and has_expert_plan(model):
        counts = expert_counts(model)
        if any(count % ep for count in counts):
            valid = valid_ep_sizes(distributed_config, counts)
            raise ValueError(
                f"ep_size={ep} does not divide the {'/'.join(map(str, sorted(counts)))} experts of "
                f"{type(model).__name__}: each EP rank holds a whole share. Valid ep_size values for "
                f"tp_size={distributed_config.tp_size}, fsdp_size={distributed_config.fsdp_size}: "
                f"{', '.join(map(str, valid)) or 'none (use ep_size=1, or a layout whose sizes divide the experts)'}.")
    return original(cls, model, distributed_config, mesh_manager)


def _ep_errors_name_no_valid_size() -> bool:
    """Upstream's error for ``DistributedConfig(tp_size=2, ep_size=3)``: the gap exists when it names no
    size that would work."""
    from transformers import DistributedConfig

    try:
        DistributedConfig(tp_size=2, ep_size=3)
    except ValueError as error:
        return "2" not in str(error).replace("tp_size", "")
    raise RuntimeError("DistributedConfig(tp_size=2, ep_size=3) was accepted")


@fix(SIZES_FIX, "transformers", _ep_errors_name_no_valid_size, waits_for=CONFIG_MODULE, layer_kind="experts")
def patch_ep_size_constraints() -> None:
    """An ``ep_size`` the layout or the experts cannot take fails with no size that would work, or late.

    ``DistributedConfig`` says only that ``ep_size`` must be a multiple of ``tp_size`` (or divide
    ``fsdp_size * tp_size``), and an ``ep_size`` that does not divide the expert count fails while the
    experts are being sharded, after the process groups exist. Detected by the error for ``tp_size=2,
    ep_size=3``: it names no valid size. Patch: both errors name the layout and the valid ``ep_size``
    values, the expert count's before the model is distributed (no weight allocated).
    """
    from transformers import DistributedConfig
    from transformers.distributed.mixin import DistributedMixin

    wrap(SIZES_FIX, DistributedConfig, "__init__", _config_checking_ep_size)
    wrap(SIZES_FIX, DistributedMixin, "maybe_distribute_model", _distribute_checking_expert_count)


# ------------------------------------------------------------------------------ one log line

_CHOSEN = "_hf_neuron_chosen"


def _chosen(distributed_config) -> dict:
    return distributed_config.__dict__.setdefault(_CHOSEN, {})


def expert_layout(model) -> dict | None:
    """``{"experts": total per layer, "local_experts": this rank's, "ep_size", "ep_implementation"}`` of a
    distributed MoE model, or None for a model without an EP plan."""
    if not has_expert_plan(model):
        return None
    config = getattr(model.config, "distributed_config", None)
    total = max(expert_counts(model))
    local = total
    for module in model.modules():
        if getattr(module, "_is_expert_parallel", False) and hasattr(module, "num_experts"):
            local = module.num_experts
            break
    return {"experts": total, "local_experts": local, "ep_size": getattr(config, "ep_size", 1),
            "ep_implementation": getattr(config, "ep_implementation", None)}


def _announce(model, distributed_config, mesh_manager) -> None:
    """Once per model, after every wrapper has decided: what hf_neuron chose for its experts."""
    chosen = distributed_config.__dict__.get(_CHOSEN)
    if not chosen or chosen.get("announced") or not _on_neuron(mesh_manager):
        return
    chosen["announced"] = True
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return
    layout = expert_layout(model)
    if layout is None:
        return
    decided = [text for key, text in chosen.items() if key != "announced"]
    logger.info("hf_neuron: %s experts: %d of %d per rank (%s); set by hf_neuron (not by you): %s",
                type(model).__name__, layout["local_experts"], layout["experts"],
                f"ep_size={layout['ep_size']}, ep_implementation={layout['ep_implementation']!r}", "; ".join(decided))


__all__ = ["DISPATCH_FIX", "EXPERTS_FIX", "SIZES_FIX", "expert_counts", "expert_layout", "has_expert_plan",
           "user_set", "valid_ep_sizes"]
