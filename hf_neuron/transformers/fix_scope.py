"""Which of hf_neuron's fixes a given architecture and workload relies on.

The fix registry (``hf-neuron env``) lists every fix; a user asking about one checkpoint wants the ones
that touch it. What a fix applies to is declared where it is registered (``fix(..., model_types=,
modality=, layer_kind=)``, see :class:`hf_neuron.patching.Fix`); what is left to its place in the
package is the capability it serves and, for the per-architecture modules, the architecture:

- a fix declaring ``model_types``, declared in ``transformers/models/<model_type>.py``, waiting for a
  module of ``transformers.models.<model_type>`` from a shared ``models/_*.py`` helper, or supplying a
  TP plan (``transformers.tp_plan.<model_type>``) belongs to those architectures;
- the other Transformers fixes belong to a capability folder: ``generation`` (the generate task),
  ``training`` (the SFT task), ``tensor_parallel`` (tensor parallelism), ``loading`` (every model);
  among them, one declaring a ``modality`` applies to vision-language models only, and one declaring a
  ``layer_kind`` to models with such layers (sliding-window attention, recurrent layers, routed experts);
- TRL's fixes belong to the SFT task.

Registering the fixes imports no Transformers submodule (and so prints none of their warnings).
"""

from __future__ import annotations

from hf_neuron.patching import Fix, all_fixes

TASKS = ("generate", "sft")

_TP_PLAN_PREFIX = "transformers.tp_plan."
_MODELS_PACKAGE = "hf_neuron.transformers.models."
_UPSTREAM_MODELS = "transformers.models."


def registered_fixes() -> list[Fix]:
    """Every Transformers and TRL fix, declared (not decided: nothing upstream is imported)."""
    import hf_neuron.transformers
    import hf_neuron.trl

    hf_neuron.transformers.register()
    hf_neuron.trl.register()
    return [f for f in all_fixes() if f.library in ("transformers", "trl")]


def fix_model_types(entry: Fix) -> tuple[str, ...]:
    """The ``model_type``s a fix exists for, or () for a fix every architecture of its scope uses."""
    if entry.model_types:
        return entry.model_types
    if entry.name.startswith(_TP_PLAN_PREFIX):
        return (entry.name[len(_TP_PLAN_PREFIX):],)
    module = entry.apply.__module__
    if module.startswith(_MODELS_PACKAGE):
        leaf = module[len(_MODELS_PACKAGE):].split(".")[0]
        if not leaf.startswith("_"):
            return (leaf,)
        waits = entry.waits_for or ""
        if waits.startswith(_UPSTREAM_MODELS):
            return (waits[len(_UPSTREAM_MODELS):].split(".")[0],)
    return ()


def fix_scope(entry: Fix) -> str:
    """``"model"``, ``"generation"``, ``"training"``, ``"tensor_parallel"``, ``"loading"`` or ``"trl"``."""
    if fix_model_types(entry):
        return "model"
    if entry.library == "trl":
        return "trl"
    module = entry.apply.__module__
    for scope in ("generation", "training", "tensor_parallel", "loading"):
        if module.startswith(f"hf_neuron.transformers.{scope}."):
            return scope
    return "loading"


def model_fixes(model_type: str) -> list[Fix]:
    """The fixes that exist for ``model_type`` alone (its own module, its TP plan)."""
    return [f for f in registered_fixes() if model_type in fix_model_types(f)]


def layer_kinds(config) -> set[str]:
    """``{"sliding_window", "recurrent", "experts"}``, or part of it: the layer kinds of ``config``'s text
    decoder."""
    from hf_neuron.transformers.tensor_parallel.experts import routed_expert_count

    text = config.get_text_config(decoder=True)
    kinds = set()
    if any(getattr(text, name, None) for name in ("sliding_window", "attention_window_size", "sliding_window_size")):
        kinds.add("sliding_window")
    types = [str(t) for t in (getattr(text, "layer_types", None) or [])]
    if any("sliding" in t or "local" in t or "chunked" in t for t in types):
        kinds.add("sliding_window")
    recurrent_words = ("mamba", "linear", "recurrent", "conv", "ssm", "rwkv", "deltanet", "mlstm")
    if any(any(w in t for w in recurrent_words) for t in types) or any(
            w in text.model_type for w in recurrent_words) or getattr(text, "state_size", None) \
            or getattr(text, "ssm_state_size", None) or getattr(text, "mamba_d_state", None):
        kinds.add("recurrent")
    if routed_expert_count(config):
        kinds.add("experts")
    return kinds


def modalities(config) -> set[str]:
    """``{"image"}`` for a vision-language model, else nothing."""
    from hf_neuron.transformers.plan import vision_language

    return {"image"} if vision_language(config) else set()


def fixes_for(config, task: str = "generate", tp: int = 1) -> list[Fix]:
    """The fixes a ``task`` ("generate" or "sft") of the model of ``config`` at tensor-parallel size
    ``tp`` relies on: its architecture's own, then those of the capabilities the task uses (each only
    where its declared modality and layer kind are the model's)."""
    if task not in TASKS:
        raise ValueError(f"task {task!r}: use one of {', '.join(TASKS)}")
    kinds, modes = layer_kinds(config), modalities(config)
    wanted = {"loading", "generation" if task == "generate" else "training"}
    if task == "sft":
        wanted.add("trl")
    if tp > 1:
        wanted.add("tensor_parallel")
    types = {config.model_type, config.get_text_config(decoder=True).model_type}
    own, shared = [], []
    for entry in registered_fixes():
        scope = fix_scope(entry)
        if scope == "model":
            if types & set(fix_model_types(entry)):
                own.append(entry)
            continue
        if (scope in wanted and (entry.modality is None or entry.modality in modes)
                and (entry.layer_kind is None or entry.layer_kind in kinds)):
            shared.append(entry)
    return own + shared


__all__ = ["TASKS", "fix_model_types", "fix_scope", "fixes_for", "layer_kinds", "modalities", "model_fixes",
           "registered_fixes"]
