"""Tensor parallelism (``from_pretrained(distributed_config=DistributedConfig(tp_size=N))``) on Neuron.

Upstream already initialises the "neuron" process group and device mesh from the current
accelerator; two gaps remain:

- ``dtensor-embedding-mask-without-index-put``: the vocabulary-parallel embedding
  (``"embedding_rowwise"``, the default for ``embed_tokens``) runs through DTensor's
  ``_MaskPartial``, which zeroes out-of-shard token ids with boolean-mask assignments
  (``x[mask] = 0``). Inside a compiled graph that is ``aten.index_put`` with a boolean index, which
  needs ``nonzero`` and does not compile on Neuron: every tensor-parallel ``generate`` fails.
- ``tp-embedding-read-replicated``: an embedding whose weight the model's own forward reads (Gemma 4's
  multimodal forward takes the pad token's row) stays whole instead of vocabulary-sharded.
- ``tp-plan-constraints``: an architecture without a TP plan, or with attention heads that do not
  divide by ``tp_size``, is either rejected late or sharded into half heads; we raise first, naming
  the architecture and the constraint.

And for the top-100 architectures upstream ships without a plan:

- ``transformers.tp_plan.<model_type>``: one per plan of :mod:`hf_neuron.transformers.tp_plans`,
  installing it as the configuration class's ``base_model_tp_plan`` while upstream's is empty.
- ``tp-plan-support``: the parallel styles and per-rank sizes those plans need.
"""

from __future__ import annotations

import inspect
import re
import weakref

import torch

from hf_neuron.patching import fix, replace, wrap
from hf_neuron.patching.class_attributes import supply_class_attribute
from hf_neuron.transformers.tp_plans import PLANS
from hf_neuron.transformers.tp_styles import build_styles

MASK_FIX = "dtensor-embedding-mask-without-index-put"
PLAN_FIX = "tp-plan-constraints"


# ----------------------------------------------------------------------------- DTensor masks


def _mask_tensor(tensor, local_offset_on_dim, local_shard_size):
    mask = (tensor < local_offset_on_dim) | (tensor >= local_offset_on_dim + local_shard_size)
    masked_tensor = torch.where(mask, torch.zeros_like(tensor), tensor - local_offset_on_dim)
    return mask, masked_tensor


def _apply_mask(self, tensor):
    if self.refcount == 0 or self.data is None:
        raise RuntimeError("MaskBuffer has not been materialized")
    mask = self.data if tensor.ndim == self.data.ndim else self.data.unsqueeze(-1)
    tensor.masked_fill_(mask, 0.0)


def _masks_use_boolean_index_put() -> bool:
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial
    from torch.fx.experimental.proxy_tensor import make_fx

    def embedding_masks(ids, output):
        mask, _ = _MaskPartial._mask_tensor(ids, 2, 3)
        buffer = MaskBuffer()
        buffer.materialize_mask(mask)
        buffer.apply_mask(output)
        return output

    graph = make_fx(embedding_masks)(torch.arange(8), torch.ones(8, 2))
    return any(
        node.op == "call_function" and "index_put" in str(node.target) for node in graph.graph.nodes
    )


@fix(MASK_FIX, "transformers", _masks_use_boolean_index_put, waits_for="transformers.distributed.tensor_parallel")
def patch_dtensor_embedding_masks() -> None:
    """Vocabulary-parallel embeddings do not compile on Neuron (boolean-mask ``index_put``).

    Gap: DTensor's ``_MaskPartial`` (used for ``"embedding_rowwise"``, Transformers' default TP
    style for ``embed_tokens``) masks token ids outside the local vocabulary shard with
    ``x[mask] = 0`` and zeroes their embeddings with ``out[mask, :] = 0``: ``aten.index_put`` with a
    boolean index, which needs ``nonzero`` and fails to compile on Neuron. Detected by tracing both
    mask steps and finding ``index_put``. Patch: the same masks with ``torch.where`` and
    ``masked_fill_`` (same values, static shapes).
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial

    replace(MASK_FIX, _MaskPartial, "_mask_tensor", staticmethod(maybe_run_for_local_tensor(_mask_tensor)))
    replace(MASK_FIX, MaskBuffer, "apply_mask", _apply_mask)


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


# ------------------------------------------------------------------ embeddings read as weights

READ_EMBEDDING_FIX = "tp-embedding-read-replicated"
_AUTOMATIC_EMBEDDING_STYLE = "embedding_rowwise"
_READS_EMBEDDING_WEIGHT = re.compile(r"\bembed_tokens\.weight\b")


def _forward_reads_embedding_weight(model) -> bool:
    """True when the forward of a module class in `model` reads ``embed_tokens.weight`` itself."""
    for cls in {type(module) for module in model.modules()}:
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            continue
        if _READS_EMBEDDING_WEIGHT.search(source):
            return True
    return False


def _replicate_embeddings(model, distributed_config, keep_whole) -> None:
    """Make the automatic vocabulary-parallel rule of each embedding ``keep_whole(name, module)`` selects
    ``"replicate"``, with the LM head tied to it; a style the user chose is kept."""
    chosen = distributed_config.tp_plan if isinstance(distributed_config.tp_plan, dict) else {}
    modules = dict(model.named_modules())
    whole = {name for name, style in model.tp_plan.items()
             if style == _AUTOMATIC_EMBEDDING_STYLE and name not in chosen and keep_whole(name, modules.get(name))}
    # A head tied to a whole embedding shares its (whole) weight, so it cannot be sharded either.
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if source.removesuffix(".weight") in whole and target.removesuffix(".weight") not in chosen:
            whole.add(target.removesuffix(".weight"))
    if whole:
        model._tp_plan = {name: "replicate" if name in whole else style for name, style in model.tp_plan.items()}


def _resolve_keeping_read_embeddings_whole(original, self, distributed_config, *args, **kwargs):
    if distributed_config.tp_size > 1 and _forward_reads_embedding_weight(self):
        _replicate_embeddings(self, distributed_config, lambda name, module: name.rsplit(".", 1)[-1] == "embed_tokens")
    return original(self, distributed_config, *args, **kwargs)


def _embeddings_sharded_by_default(embedding_class=torch.nn.Embedding) -> bool:
    from transformers import LlamaConfig
    from transformers.distributed.mixin import DistributedMixin

    class _Probe(torch.nn.Module, DistributedMixin):
        def __init__(self):
            super().__init__()
            self.config = LlamaConfig(vocab_size=16, hidden_size=8, num_attention_heads=2, num_key_value_heads=2)
            self.embed_tokens = embedding_class(16, 8)

        @property
        def base_model(self):
            return self

    probe = _Probe()
    probe.init_parallel_plans()
    return probe.tp_plan.get("embed_tokens") == _AUTOMATIC_EMBEDDING_STYLE


@fix(READ_EMBEDDING_FIX, "transformers", _embeddings_sharded_by_default, waits_for="transformers.distributed.mixin")
def patch_read_embeddings_replicated() -> None:
    """A model whose forward reads its embedding weight cannot run with that weight vocabulary-sharded.

    Gap: Transformers adds ``embed_tokens: "embedding_rowwise"`` to every base model's TP plan, which
    turns the weight into a DTensor sharded over the vocabulary. The embedding's own forward handles
    that, but code that indexes the weight directly does not: Gemma 4's multimodal forward builds its
    per-layer inputs from ``embed_tokens.weight[pad_token_id]`` and ``torch.where`` then mixes that
    DTensor with plain tensors and raises, so every tensor-parallel Gemma 4 forward fails. Detected by
    letting the model mixin build the plans of a base model with a Llama configuration and an
    embedding, and reading the embedding's style.
    Patch: when a module class of the model reads ``embed_tokens.weight`` in its forward, the default
    rule becomes ``"replicate"`` (each rank keeps the whole table), and so does the rule of an LM head
    tied to it (it shares the weight); a style the user passes in
    ``DistributedConfig(tp_plan=...)`` is kept.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(READ_EMBEDDING_FIX, DistributedMixin, "_resolve_parallel_plans", _resolve_keeping_read_embeddings_whole)


POSTPROCESSED_EMBEDDING_FIX = "tp-embedding-postprocessed-replicated"


def _post_processes_lookup(module) -> bool:
    """An embedding whose class overrides the lookup's forward and holds a module it applies there (a norm).

    A forward that only scales the lookup (Gemma's ``ScaledWordEmbedding``) holds no module: a scaled
    partial sum is the partial sum of the scaled rows, so those stay vocabulary-sharded.
    """
    return (isinstance(module, torch.nn.Embedding) and type(module).forward is not torch.nn.Embedding.forward
            and any(True for _ in module.children()))


def _resolve_keeping_postprocessed_embeddings_whole(original, self, distributed_config, *args, **kwargs):
    if distributed_config.tp_size > 1:
        _replicate_embeddings(self, distributed_config, lambda name, module: _post_processes_lookup(module))
    return original(self, distributed_config, *args, **kwargs)


class _NormedEmbedding(torch.nn.Embedding):
    """The detection's embedding: a lookup followed by a normalisation, as Muse Glimmer's and Inkling's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.embed_norm = torch.nn.LayerNorm(self.embedding_dim, elementwise_affine=False)

    def forward(self, input):
        return self.embed_norm(super().forward(input))


@fix(POSTPROCESSED_EMBEDDING_FIX, "transformers", lambda: _embeddings_sharded_by_default(_NormedEmbedding),
     waits_for="transformers.distributed.mixin")
def patch_postprocessed_embeddings_replicated() -> None:
    """An embedding that normalises its own lookup fails when vocabulary-sharded (Muse Glimmer, Inkling).

    Gap: ``"embedding_rowwise"``, the rule Transformers adds for every ``embed_tokens``, all-reduces
    the lookup after the module's whole forward. An embedding class that post-processes the lookup in
    its forward (an RMS norm, in Muse Glimmer's and Inkling's) then runs it on each rank's partial
    lookup: DTensor's pending mask is reduced twice (``AssertionError``), and a norm of a partial sum
    is not the norm of the sum. Detected by letting the model mixin build the plans of a base model
    whose embedding normalises its lookup. Patch: an embedding whose class overrides the forward and
    holds a module it applies there (a norm; a scale alone is linear and stays sharded), and a head
    tied to it, is replicated (each rank keeps the whole table); a style the user passes is kept.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(POSTPROCESSED_EMBEDDING_FIX, DistributedMixin, "_resolve_parallel_plans",
         _resolve_keeping_postprocessed_embeddings_whole)


# ------------------------------------------------------------------ hf_neuron's plans and styles

SUPPORT_FIX = "tp-plan-support"

# id(plan dict installed on a configuration class) -> its TextPlan. Identity, so an upstream plan is never ours.
_INSTALLED: dict = {}
# Modules already adjusted to their rank's share (sharding twice must not halve again).
_localized: weakref.WeakSet = weakref.WeakSet()


def plan_for(model):
    """The :class:`~hf_neuron.transformers.tp_plans.TextPlan` behind ``model``'s configuration, if hf_neuron installed it."""
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
        f"(hf_neuron.transformers.tp_plans).",
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

    from hf_neuron.transformers.cache_shapes import falcon_kv_heads

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
    :mod:`hf_neuron.transformers.tp_styles` are registered, and after a model with an hf_neuron plan is
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
