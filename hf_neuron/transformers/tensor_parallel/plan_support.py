"""Tensor parallelism (``from_pretrained(distributed_config=DistributedConfig(tp_size=N))``) on Neuron.

Upstream already initialises the "neuron" process group and device mesh from the current
accelerator (the embedding gaps are in :mod:`.embeddings`); here:

- ``tp-plan-constraints``: an architecture without a TP plan, or with attention heads that do not
  divide by ``tp_size``, is either rejected late or sharded into half heads; we raise first, naming
  the architecture and the constraint.

And for the top-100 architectures upstream ships without a plan:

- ``transformers.tp_plan.<model_type>``: one per plan of :mod:`hf_neuron.transformers.tensor_parallel.plans`,
  installing it as the configuration class's ``base_model_tp_plan`` while upstream's is empty.
- ``tp-plan-support``: the parallel styles and per-rank sizes those plans need.
"""

from __future__ import annotations

import re
import weakref

import torch

from hf_neuron.patching import fix, replace, wrap
from hf_neuron.patching.class_attributes import supply_class_attribute
from hf_neuron.transformers.tensor_parallel.plans import PLANS
from hf_neuron.transformers.tensor_parallel.styles import build_styles

PLAN_FIX = "tp-plan-constraints"


# ----------------------------------------------------------------------------- plan constraints

_HEAD_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "Wqkv")


def _head_constraint_violations(model, tp_size: int, tp_plan: dict[str, str]) -> list[str]:
    if not any(name.rsplit(".", 1)[-1] in _HEAD_PROJECTIONS and "colwise" in style for name, style in tp_plan.items()):
        return []  # attention is not sharded by heads
    config = model.config.get_text_config(decoder=True)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if kv_heads_whole(model):
        kv_heads = heads  # the key/value heads stay whole on every rank
    problems = []
    if isinstance(heads, int) and heads % tp_size:
        problems.append(f"num_attention_heads={heads} is not divisible by tp_size={tp_size}")
    if isinstance(kv_heads, int) and kv_heads != heads and kv_heads % tp_size:
        problems.append(f"num_key_value_heads={kv_heads} is not divisible by tp_size={tp_size}")
    return problems


def _resolve_plans_checking_heads(original, self, distributed_config, *args, **kwargs):
    plans = original(self, distributed_config, *args, **kwargs)
    tp_size = distributed_config.tp_size
    if tp_size > 1:
        problems = _head_constraint_violations(self, tp_size, plans[0])
        if problems:
            valid = [n for n in range(2, 65) if not _head_constraint_violations(self, n, plans[0])][:6]
            raise ValueError(
                f"Tensor parallelism shards attention by heads, but for {type(self).__name__} "
                f"(model_type {self.config.model_type!r}) {' and '.join(problems)}. Use a tp_size that divides "
                f"the head counts (e.g. {', '.join(map(str, valid)) or 'none up to 64'}) and launch that many "
                f"processes per model replica."
            )
    return plans


def _plans_accept_uneven_heads() -> bool:
    from transformers import DistributedConfig, LlamaConfig
    from transformers.distributed.mixin import DistributedMixin

    class _Probe(torch.nn.Module, DistributedMixin):
        def __init__(self):
            super().__init__()
            self.config = LlamaConfig(num_attention_heads=4, num_key_value_heads=4, hidden_size=8)
            self.q_proj = torch.nn.Linear(8, 8)
            self._tp_plan = {"q_proj": "colwise"}
            self._ep_plan, self._fsdp_plan = {}, {}

    try:
        _Probe()._resolve_parallel_plans(DistributedConfig(tp_size=3))
    except ValueError:
        return False
    return True


@fix(PLAN_FIX, "transformers", _plans_accept_uneven_heads, waits_for="transformers.distributed.mixin")
def patch_tp_plan_constraints() -> None:
    """A head count that ``tp_size`` does not divide fails late with an unrelated shape error.

    Gap: ``_resolve_parallel_plans`` checks that a TP plan exists but not that the attention heads
    split evenly, so ``tp_size=3`` on a 4-head model (or ``tp_size=4`` with 2 KV heads) loads, then
    fails inside the compiled forward (``shape '[2, 16, -1, 16]' is invalid``). Detected by
    resolving a plan for 4 heads with ``tp_size=3``. Patch: before any weight is loaded, a ValueError names the architecture, the
    head counts and the tp sizes that work.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(PLAN_FIX, DistributedMixin, "_resolve_parallel_plans", _resolve_plans_checking_heads)


# ------------------------------------------------------------------ hf_neuron's plans and styles

SUPPORT_FIX = "tp-plan-support"

# id(plan dict installed on a configuration class) -> its TextPlan. Identity, so an upstream plan is never ours.
_INSTALLED: dict = {}
# Modules already adjusted to their rank's share (sharding twice must not halve again).
_localized: weakref.WeakSet = weakref.WeakSet()


def plan_for(model):
    """The :class:`~hf_neuron.transformers.tensor_parallel.plans.TextPlan` behind ``model``'s configuration, if hf_neuron installed it."""
    config = getattr(model, "config", None)
    plan = type(config).__dict__.get("base_model_tp_plan") if config is not None else None
    return _INSTALLED.get(id(plan)) if plan is not None else None


def kv_heads_whole(model) -> bool:
    """Whether ``model``'s hf_neuron plan keeps the key/value heads whole on every rank (only queries split)."""
    text_plan = plan_for(model)
    return text_plan is not None and (text_plan.kv_replicated or getattr(model, "_hf_neuron_kv_whole", False))


def _register_plan_fix(text_plan) -> None:
    def installed(plan: dict) -> None:
        _INSTALLED[id(plan)] = text_plan

    supply_class_attribute(
        f"transformers.tp_plan.{text_plan.model_type}",
        text_plan.config_module,
        text_plan.config_class,
        "base_model_tp_plan",
        lambda: dict(text_plan.plan),
        f"Transformers ships {text_plan.config_class} without a `base_model_tp_plan`, so "
        f"`DistributedConfig(tp_size=N)` cannot shard {text_plan.model_type}; hf_neuron installs one "
        f"(hf_neuron.transformers.tensor_parallel.plans).",
        installed,
        library="transformers",
    )


for _text_plan in PLANS.values():
    _register_plan_fix(_text_plan)


def _glob_modules(model, pattern: str) -> dict:
    """``{full module name: module}`` for a base-model glob (``*`` = one layer index)."""
    base = model.base_model
    prefix = "" if base is model else f"{model.base_model_prefix}."
    regex = re.compile("^" + re.escape(pattern).replace(r"\*", r"\d+") + "$")
    return {prefix + name: module for name, module in base.named_modules() if regex.match(name)}


def _sized_modules(model, text_plan, tp_plan: dict) -> list:
    """(name, module, attributes) of the local-size modules whose children the resolved plan shards."""
    found = []
    sizes = dict(text_plan.local_sizes)
    if getattr(model, "_hf_neuron_kv_whole", False):
        sizes.update(text_plan.kv_whole_sizes)
    for pattern, attributes in sizes.items():
        for name, module in _glob_modules(model, pattern).items():
            if any(key.startswith(name + ".") for key in tp_plan):
                found.append((name, module, attributes))
    return found


def _check_plan_applies(model, text_plan, tp_plan: dict, tp_size: int) -> None:
    config = model.config.get_text_config(decoder=True)
    reason = text_plan.applies(config) if text_plan.applies is not None else None
    if reason:
        raise ValueError(
            f"hf_neuron's tensor-parallel plan for {text_plan.model_type} does not cover this configuration: "
            f"{reason}. Pass your own plan with DistributedConfig(tp_size={tp_size}, tp_plan={{...}})."
        )
    for name, module, attributes in _sized_modules(model, text_plan, tp_plan):
        for attr in attributes:
            value = getattr(module, attr, None)
            if isinstance(value, int) and value % tp_size:
                raise ValueError(
                    f"Tensor parallelism splits {type(module).__name__}.{attr}={value} of {type(model).__name__} "
                    f"({name}) over the ranks, and tp_size={tp_size} does not divide it: use a tp_size that divides {value}."
                )


def _keep_kv_whole_if_heads_do_not_split(model, text_plan, tp_size: int) -> None:
    """Drop the plan's key/value projections when ``tp_size`` does not divide the key/value heads."""
    if not text_plan.kv_projections:
        return
    kv_heads = getattr(model.config.get_text_config(decoder=True), "num_key_value_heads", None)
    if isinstance(kv_heads, int) and kv_heads % tp_size:
        model._tp_plan = {key: style for key, style in model._tp_plan.items()
                          if not any(key == glob or key.endswith("." + glob) for glob in text_plan.kv_projections)}
        model._hf_neuron_kv_whole = True


def _resolve_checking_our_plans(original, self, distributed_config, *args, **kwargs):
    text_plan = plan_for(self)
    if text_plan is not None and distributed_config.tp_size > 1:
        _keep_kv_whole_if_heads_do_not_split(self, text_plan, distributed_config.tp_size)
    plans = original(self, distributed_config, *args, **kwargs)
    if text_plan is not None and distributed_config.tp_size > 1:
        _check_plan_applies(self, text_plan, plans[0], distributed_config.tp_size)
    return plans


def _apply_then_localize(original, model, tp_mesh, tp_plan, *args, **kwargs):
    text_plan = plan_for(model)
    model = original(model, tp_mesh, tp_plan, *args, **kwargs)
    if text_plan is not None:
        for _, module, attributes in _sized_modules(model, text_plan, tp_plan):
            if module in _localized:
                continue
            for attr in attributes:
                value = getattr(module, attr, None)
                if isinstance(value, int):
                    setattr(module, attr, value // tp_mesh.size())
            _localized.add(module)
    return model


def _cache_heads_per_rank(original, self):
    """The static cache's key/value heads per rank under an hf_neuron plan (upstream's count only knows
    the projections its own plans name: ``k_proj``, ``qkv_proj``, ``query_key_value`` colwise)."""
    shape = original(self)
    text_plan, tp_size = plan_for(self), getattr(self, "_tp_size", None) or 1
    if shape is None or text_plan is None or tp_size == 1:
        return shape
    from transformers.configuration_utils import get_head_shapes

    from hf_neuron.transformers.models.falcon import falcon_kv_heads

    config = self.config.get_text_config(decoder=True)
    heads = falcon_kv_heads(config) or get_head_shapes(config)[0]
    if kv_heads_whole(self):
        return heads, shape[1]
    if isinstance(heads, int):
        return heads // tp_size, shape[1]
    return [h // tp_size for h in heads], shape[1]


def _styles_missing() -> bool:
    from transformers.distributed import mixin
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES

    if not callable(getattr(mixin, "apply_tensor_parallelism", None)):
        raise RuntimeError("transformers.distributed.mixin has no apply_tensor_parallelism to extend")
    return any(name not in ALL_PARALLEL_STYLES for name in build_styles())


@fix(SUPPORT_FIX, "transformers", _styles_missing, waits_for="transformers.distributed.mixin")
def patch_tp_plan_support() -> None:
    """hf_neuron's TP plans need parallel styles and per-rank sizes that Transformers' plans cannot express.

    Gap: Transformers' styles shard ``nn.Linear`` layers with equal fused pieces, and its models that
    reshape with a stored head count (``view(b, s, self.num_heads, d)``) fail once their heads are
    sharded. Detected by looking up hf_neuron's style names in ``ALL_PARALLEL_STYLES`` (and that
    ``apply_tensor_parallelism`` is what the model mixin calls). Patch: the styles of
    :mod:`hf_neuron.transformers.tensor_parallel.styles` are registered, and after a model with an hf_neuron plan is
    sharded, the head counts and widths its plan names become the rank's share (before that, a
    configuration the plan does not cover or a size the TP degree does not divide raises, naming it).
    Models with upstream plans are untouched.
    """
    from transformers.distributed import mixin
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES
    from transformers.generation.utils import GenerationMixin

    for name, style in build_styles().items():
        replace(SUPPORT_FIX, ALL_PARALLEL_STYLES, name, style, mapping=True)
    wrap(SUPPORT_FIX, mixin.DistributedMixin, "_resolve_parallel_plans", _resolve_checking_our_plans)
    wrap(SUPPORT_FIX, mixin, "apply_tensor_parallelism", _apply_then_localize)
    wrap(SUPPORT_FIX, GenerationMixin, "_get_static_cache_init_shape", _cache_heads_per_rank)
