"""Fixes that let ``TensorParallelConfig`` shard diffusers classes upstream ships without a ``_tp_plan``.

Three kinds of fix, all in diffusers' own mechanism (``_tp_plan`` + ``apply_tensor_parallel``):

- ``diffusers.tp_plan.<Class>``: one per class of :mod:`hf_neuron.diffusers.tp_plans`, installing our
  plan as ``<Class>._tp_plan`` when the class's module is imported — only if upstream's is None.
- ``diffusers.tp_plan_support``: what sharding those classes needs beyond the plan dict, applied
  only to models whose plan is ours (upstream's own plans keep upstream's behaviour):
  attention modules keep a per-rank head count, across-heads QK norms reduce over the ranks, per-head
  parameters keep their rank's slice, and a glob may skip ModuleList elements that lack the projection.
- ``diffusers.tp_clear_errors``: every rejection names the class and the constraint broken.
"""

from __future__ import annotations

import logging
import sys
import weakref

import torch

from hf_neuron.diffusers import tp_plans  # noqa: F401  (fills PLANS)
from hf_neuron.patching.class_attributes import supply_class_attribute
from hf_neuron.diffusers.plan_registry import PLANS, ClassPlan
from hf_neuron.patching import fix, mark_closed, original, when_imported, wrap
from hf_neuron.patching.sources import module_path

logger = logging.getLogger("hf_neuron")

TP_HOOKS_MODULE = "diffusers.hooks.tensor_parallel"

# Attribute names under which attention modules keep head counts that processors split with.
HEAD_ATTRIBUTES = ("heads", "kv_heads", "num_heads", "num_kv_heads", "n_heads", "n_kv_heads")

SUPPORT_FIX = "diffusers.tp_plan_support"
ERRORS_FIX = "diffusers.tp_clear_errors"

# id(plan dict installed on a class) -> its ClassPlan. Identity, so an upstream plan is never ours.
_INSTALLED: dict[int, ClassPlan] = {}
# Modules of a sharded model already adjusted to their rank's share (sharding twice must not halve again).
_localized: weakref.WeakSet = weakref.WeakSet()
_sized: weakref.WeakSet = weakref.WeakSet()
_rotary_hooks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_sliced: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> its per-head parameters already sliced


def plan_for(model_or_plan) -> ClassPlan | None:
    """The :class:`ClassPlan` behind a model's (or a plan dict's) ``_tp_plan``, if hf_neuron installed it."""
    plan = model_or_plan if isinstance(model_or_plan, dict) else getattr(model_or_plan, "_tp_plan", None)
    return _INSTALLED.get(id(plan)) if plan is not None else None


def installed_classes() -> list[str]:
    return sorted(cp.class_name for cp in _INSTALLED.values())


# ------------------------------------------------------------------------------ per-class plans


def _register_plan_fix(class_plan: ClassPlan) -> None:
    def installed(plan: dict) -> None:
        _INSTALLED[id(plan)] = class_plan
        logger.info("hf_neuron: installed a tensor-parallel plan on %s", class_plan.class_name)

    supply_class_attribute(
        f"diffusers.tp_plan.{class_plan.class_name}",
        class_plan.module_path,
        class_plan.class_name,
        "_tp_plan",
        class_plan.build,
        f"diffusers ships {class_plan.class_name} without a `_tp_plan`, so `TensorParallelConfig` cannot shard "
        f"it; hf_neuron installs one (hf_neuron.diffusers.tp_plans).",
        installed,
    )


for _class_plan in PLANS.values():
    _register_plan_fix(_class_plan)


# -------------------------------------------------------------------- plan resolution (ours only)


def _walk(root: torch.nn.Module, path: str):
    module = root
    for atom in filter(None, path.split(".")):
        module = getattr(module, atom, None) if module is not None else None
    return module


def _resolve_ours(model: torch.nn.Module, tp_plan: dict) -> list:
    """``_resolve_tp_plan`` for our plans: a glob entry is skipped on elements that lack it, and the
    config-dependent packed block sizes are set on the Linear layers before anything reads them."""
    class_plan = plan_for(tp_plan)
    packed_blocks = class_plan.packed_blocks if class_plan is not None else {}
    grouped: dict[int, tuple] = {}
    order: list[int] = []
    for pattern, style in tp_plan.items():
        if "*" in pattern:
            prefix, _, suffix = pattern.partition("*")
            container = _walk(model, prefix.strip("."))
            if not isinstance(container, torch.nn.ModuleList):
                continue
            relative, blocks = suffix.strip("."), list(container)
        else:
            relative, blocks = pattern, [model]
        for block in blocks:
            linear = _walk(block, relative)
            if not isinstance(linear, torch.nn.Linear):
                continue
            if pattern in packed_blocks:
                attribute = "_tp_packed_col_blocks" if _is_colwise(style) else "_tp_packed_row_blocks"
                setattr(linear, attribute, [int(size) for size in packed_blocks[pattern](block)])
            if id(block) not in grouped:
                grouped[id(block)] = (block, {})
                order.append(id(block))
            grouped[id(block)][1][relative] = style
    return [grouped[key] for key in order]


def _is_colwise(style) -> bool:
    return style == "colwise" or type(style).__name__ == "PackedColwiseParallel"


def sharded_attention_modules(model: torch.nn.Module, tp_plan: dict) -> dict[str, torch.nn.Module]:
    """Modules holding a head count whose projections the plan shards column-wise, by qualified name."""
    names = {id(module): name for name, module in model.named_modules()}
    found: dict[str, torch.nn.Module] = {}
    for block, relative_plan in _resolve_ours(model, tp_plan):
        for relative, style in relative_plan.items():
            if not _is_colwise(style) or "." not in relative:
                continue
            parent = _walk(block, relative.rpartition(".")[0])
            if any(isinstance(getattr(parent, attr, None), int) for attr in HEAD_ATTRIBUTES):
                found[names[id(parent)]] = parent
    return found


def _expand(model: torch.nn.Module, pattern: str) -> dict[str, torch.nn.Module]:
    if "*" not in pattern:
        module = _walk(model, pattern)
        return {pattern: module} if module is not None else {}
    prefix, _, suffix = pattern.partition("*")
    container = _walk(model, prefix.strip("."))
    if not isinstance(container, torch.nn.ModuleList):
        return {}
    found = {}
    for index, block in enumerate(container):
        module = _walk(block, suffix.strip("."))
        if module is not None:
            found[f"{prefix}{index}{suffix}"] = module
    return found


def _indivisible(modules: dict, attributes, tp_degree: int):
    """``(name, attribute, value)`` for each integer attribute of the named modules the degree does not divide."""
    for name, module in modules.items():
        for attr in attributes:
            value = getattr(module, attr, None)
            if isinstance(value, int) and value % tp_degree:
                yield name, attr, value


def check_divisible(model: torch.nn.Module, class_plan: ClassPlan, tp_plan: dict, tp_degree: int) -> None:
    """Reject a degree that splits a head or an across-heads norm, before any weight is touched."""
    cls = type(model).__name__
    for name, attr, value in _indivisible(sharded_attention_modules(model, tp_plan), HEAD_ATTRIBUTES, tp_degree):
        raise ValueError(
            f"Cannot shard {cls} across {tp_degree} tensor-parallel ranks: the tensor-parallel degree must "
            f"divide the attention head count, and '{name}' has {attr}={value}. Use a degree that divides {value}."
        )
    for pattern, attributes in class_plan.local_sizes.items():
        for name, attr, value in _indivisible(_expand(model, pattern), attributes, tp_degree):
            raise ValueError(
                f"Cannot shard {cls} across {tp_degree} tensor-parallel ranks: '{name}' splits a sharded "
                f"tensor into parts of {attr}={value}, which the degree must divide."
            )
    for pattern, dim in class_plan.sharded_parameters.items():
        for name, param in _expand(model, pattern).items():
            if isinstance(param, torch.Tensor) and param.shape[dim] % tp_degree:
                raise ValueError(
                    f"Cannot shard {cls} across {tp_degree} tensor-parallel ranks: '{name}' holds "
                    f"{param.shape[dim]} per-head entries, which the degree must divide."
                )
    for pattern in class_plan.across_heads_norms:
        for name, norm in _expand(model, pattern).items():
            weight = getattr(norm, "weight", None)
            size = norm.normalized_shape[-1] if hasattr(norm, "normalized_shape") else weight.shape[-1]
            if int(size) % tp_degree:
                raise ValueError(
                    f"Cannot shard {cls} across {tp_degree} tensor-parallel ranks: '{name}' normalises over "
                    f"{size} features, which the degree must divide."
                )


# ------------------------------------------------------------------------- across-heads QK norm


class AcrossHeadsRMSNorm(torch.nn.Module):
    """RMSNorm over a column-sharded projection: each rank holds ``dim / tp`` of the features.

    The mean of squares is taken over all ranks (one all-reduce of a ``[..., 1]`` tensor), so the result
    on each rank equals its slice of the unsharded norm. ``weight`` holds this rank's slice.
    """

    def __init__(self, norm: torch.nn.Module, mesh, full_dim: int):
        super().__init__()
        self.mesh = mesh
        self.full_dim = full_dim
        self.eps = norm.eps
        self.weight = self._local_parameter(getattr(norm, "weight", None))
        self.bias = self._local_parameter(getattr(norm, "bias", None))

    def _local_parameter(self, param):
        if not isinstance(param, torch.nn.Parameter):
            return None
        rank, chunk = self.mesh.get_local_rank(), self.full_dim // self.mesh.size()
        return torch.nn.Parameter(param.data[rank * chunk:(rank + 1) * chunk].clone(),
                                  requires_grad=param.requires_grad)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        from torch.distributed._functional_collectives import all_reduce

        input_dtype = hidden_states.dtype
        squares = hidden_states.to(torch.float32).pow(2).sum(-1, keepdim=True)
        squares = all_reduce(squares, "sum", self.mesh)
        eps = self.eps if self.eps is not None else torch.finfo(input_dtype).eps
        hidden_states = hidden_states.to(torch.float32) * torch.rsqrt(squares / self.full_dim + eps)
        if self.weight is not None:
            hidden_states = hidden_states.to(self.weight.dtype) * self.weight
            if self.bias is not None:
                hidden_states = hidden_states + self.bias
        return hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"full_dim={self.full_dim}, eps={self.eps}, tp={self.mesh.size()}"


class AcrossHeadsLayerNorm(AcrossHeadsRMSNorm):
    """LayerNorm over a column-sharded projection (``qk_norm="layer_norm_across_heads"``, LuminaNext).

    Like :class:`AcrossHeadsRMSNorm`, with the mean first: one all-reduce for the mean, one for the
    variance around it (two passes, as ``nn.LayerNorm`` computes it).
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        from torch.distributed._functional_collectives import all_reduce

        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = all_reduce(hidden_states.sum(-1, keepdim=True), "sum", self.mesh) / self.full_dim
        centered = hidden_states - mean
        variance = all_reduce(centered.pow(2).sum(-1, keepdim=True), "sum", self.mesh) / self.full_dim
        hidden_states = centered * torch.rsqrt(variance + self.eps)
        if self.weight is not None:
            hidden_states = hidden_states * self.weight.to(torch.float32)
        if self.bias is not None:
            hidden_states = hidden_states + self.bias.to(torch.float32)
        return hidden_states.to(input_dtype)


def _shard_across_heads_norms(model: torch.nn.Module, class_plan: ClassPlan, mesh) -> None:
    for pattern in class_plan.across_heads_norms:
        for name, norm in _expand(model, pattern).items():
            if isinstance(norm, AcrossHeadsRMSNorm):
                continue
            size = norm.normalized_shape[-1] if hasattr(norm, "normalized_shape") else norm.weight.shape[-1]
            parent_name, _, attr = name.rpartition(".")
            kind = AcrossHeadsLayerNorm if isinstance(norm, torch.nn.LayerNorm) else AcrossHeadsRMSNorm
            setattr(model.get_submodule(parent_name), attr, kind(norm, mesh, int(size)))


def _shard_parameters(model: torch.nn.Module, class_plan: ClassPlan, mesh) -> None:
    """Replace each per-head parameter by this rank's contiguous slice of its heads, once."""
    rank, size = mesh.get_local_rank(), mesh.size()
    for pattern, dim in class_plan.sharded_parameters.items():
        for name, param in _expand(model, pattern).items():
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            if not isinstance(param, torch.nn.Parameter) or attr in _sliced.setdefault(parent, set()):
                continue
            chunk = param.shape[dim] // size
            local = param.data.narrow(dim, rank * chunk, chunk).clone()
            setattr(parent, attr, torch.nn.Parameter(local, requires_grad=param.requires_grad))
            _sliced[parent].add(attr)


def _slice_rotary_output(dim_of, mesh):
    def hook(module, args, output):
        dim = dim_of(module) if callable(dim_of) else dim_of
        rank, size = mesh.get_local_rank(), mesh.size()

        def local(tensor):
            if not isinstance(tensor, torch.Tensor):
                return tensor
            full = tensor.shape[dim]
            if full % size:
                raise ValueError(
                    f"Cannot shard the rotary embedding of {type(module).__name__} across {size} ranks: its "
                    f"dimension {dim} has {full} entries, which the tensor-parallel degree must divide."
                )
            return tensor.narrow(dim, rank * (full // size), full // size)

        if isinstance(output, (tuple, list)):
            return type(output)(local(t) for t in output)
        return local(output)

    return hook


def _shard_rotary(model: torch.nn.Module, class_plan: ClassPlan, mesh) -> None:
    for path, dim_of in class_plan.sharded_rotary.items():
        module = _walk(model, path)
        if module is None or module in _rotary_hooks:
            continue
        _rotary_hooks[module] = module.register_forward_hook(_slice_rotary_output(dim_of, mesh))


def _divide_once(modules, attributes, tp_degree: int, done: weakref.WeakSet) -> None:
    """Divide the integer ``attributes`` of each module by ``tp_degree``, once per module."""
    for module in modules:
        if module in done:
            continue
        for attr in attributes:
            value = getattr(module, attr, None)
            if isinstance(value, int):
                setattr(module, attr, value // tp_degree)
        done.add(module)


def _localize_sizes(model: torch.nn.Module, class_plan: ClassPlan, tp_degree: int) -> None:
    for pattern, attributes in class_plan.local_sizes.items():
        _divide_once(_expand(model, pattern).values(), attributes, tp_degree, _sized)


def _localize_heads(model: torch.nn.Module, tp_plan: dict, tp_degree: int) -> None:
    _divide_once(sharded_attention_modules(model, tp_plan).values(), HEAD_ATTRIBUTES, tp_degree, _localized)


# ---------------------------------------------------------------------------------- the patches


def _tp_hooks_module_exists() -> bool:
    return module_path(TP_HOOKS_MODULE) is not None


def _resolve_tp_plan(original_resolve, model, tp_plan):
    if plan_for(tp_plan) is not None:
        return _resolve_ours(model, tp_plan)
    return original_resolve(model, tp_plan)


def _resolve_specs_checking_divisibility(original_specs, model, tp_plan, tp_degree):
    class_plan = plan_for(tp_plan)
    if class_plan is not None:
        check_divisible(model, class_plan, tp_plan, tp_degree)
    return original_specs(model, tp_plan, tp_degree)


def _apply_then_localize(original_apply, model, config, tp_plan, weights_already_sharded=False):
    original_apply(model, config, tp_plan, weights_already_sharded=weights_already_sharded)
    class_plan = plan_for(tp_plan)
    if class_plan is not None:
        mesh = config._mesh
        _localize_heads(model, tp_plan, mesh.size())
        _localize_sizes(model, class_plan, mesh.size())
        _shard_across_heads_norms(model, class_plan, mesh)
        _shard_parameters(model, class_plan, mesh)
        _shard_rotary(model, class_plan, mesh)


def _patch_support(tp_module) -> None:
    upstream_apply = original(tp_module, "apply_tensor_parallel")
    wrap(SUPPORT_FIX, tp_module, "_resolve_tp_plan", _resolve_tp_plan)
    wrap(SUPPORT_FIX, tp_module, "resolve_tp_shard_specs", _resolve_specs_checking_divisibility)
    wrap(SUPPORT_FIX, tp_module, "apply_tensor_parallel", _apply_then_localize)
    hooks_package = sys.modules.get("diffusers.hooks")
    if hooks_package is not None and original(hooks_package, "apply_tensor_parallel") is upstream_apply:
        wrap(SUPPORT_FIX, hooks_package, "apply_tensor_parallel", _apply_then_localize)


@fix(SUPPORT_FIX, "diffusers", _tp_hooks_module_exists)
def tp_plan_support() -> None:
    """diffusers' TP assumes processors that split heads by head_dim and per-head QK norms; most classes do not.

    Flux and Qwen-Image processors split heads with `head_dim`; most others split with `attn.heads`, and
    some normalise q/k across all heads. Detected by the presence of diffusers.hooks.tensor_parallel;
    acts only on models whose `_tp_plan` is one hf_neuron installed (identity check), so upstream plans keep upstream behaviour. After
    sharding, the head counts of column-sharded attention modules become per-rank counts, across-heads
    RMS/LayerNorms reduce their statistics over the ranks, per-head parameters keep their rank's heads,
    a glob skips ModuleList elements lacking the projection, and a degree that splits a head is
    rejected before any weight is sharded.
    """
    when_imported(TP_HOOKS_MODULE, _patch_support)


# ------------------------------------------------------------------------------- clear errors


def _names_class(check, probe: str) -> bool:
    """Whether upstream's head-count rejection names the class (probed with a fake class name)."""
    from diffusers import TensorParallelConfig

    try:
        check(probe, {}, 3, TensorParallelConfig(tp_degree=2))
    except ValueError as exc:
        return probe in str(exc)
    return True


def _check_naming_the_class(original_check, model_name, tp_plan, num_heads, tp_config, **kwargs):
    if tp_plan is None:
        from hf_neuron.diffusers.unsupported import reason_without_plan

        reason = reason_without_plan(model_name) or "not examined yet"
        raise ValueError(
            f"{model_name} cannot be sharded with tensor parallelism: it has no `_tp_plan`, upstream or from "
            f"hf_neuron ({reason}). Run it without `parallel_config` (replicated on each device), or see "
            f"compatibility/diffusers.md for the classes that can be sharded."
        )
    try:
        original_check(model_name, tp_plan, num_heads, tp_config, **kwargs)
    except ValueError as exc:
        if model_name in str(exc):
            raise
        raise ValueError(f"Cannot shard {model_name} with tensor parallelism: {exc}") from None


def _specs_naming_the_class(original_specs, model, tp_plan, tp_degree):
    try:
        return original_specs(model, tp_plan, tp_degree)
    except ValueError as exc:
        name = type(model).__name__
        if name in str(exc):
            raise
        raise ValueError(
            f"{name}: {exc} The tensor-parallel degree must divide every sharded projection (attention heads "
            f"x head_dim, FFN width)."
        ) from None


def _patch_errors(tp_module) -> None:
    if _names_class(original(tp_module, "_check_tp_supported"), "HfNeuronProbeModel"):
        mark_closed(ERRORS_FIX, "upstream errors already name the class")
        return
    wrap(ERRORS_FIX, tp_module, "_check_tp_supported", _check_naming_the_class)
    wrap(ERRORS_FIX, tp_module, "resolve_tp_shard_specs", _specs_naming_the_class)


@fix(ERRORS_FIX, "diffusers", _tp_hooks_module_exists)
def tp_clear_errors() -> None:
    """diffusers' TP rejections (heads, FFN width, device_map, no plan) do not name the class; re-raise naming it.

    Detected on import of diffusers.hooks.tensor_parallel by probing `_check_tp_supported` with a fake
    class name and an indivisible head count: the patch is applied only if the message lacks the name.
    """
    # Registered after tp_plan_support, so its wrapper sits outside (errors from our checks already name the class).
    when_imported(TP_HOOKS_MODULE, _patch_errors)
