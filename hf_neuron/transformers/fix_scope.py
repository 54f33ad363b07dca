"""Which of hf_neuron's fixes a given architecture and workload relies on.

The fix registry (``hf-neuron env``) lists every fix; a user asking about one checkpoint wants the ones
that touch it. A fix's scope is read from where it lives, so there is no list to keep:

- a fix declared in ``transformers/models/<model_type>.py``, waiting for a module of
  ``transformers.models.<model_type>`` from a shared ``models/_*.py`` helper, or supplying a TP plan
  (``transformers.tp_plan.<model_type>``) belongs to that architecture;
- the other Transformers fixes belong to a capability folder: ``generation`` (the generate task),
  ``training`` (the SFT task), ``tensor_parallel`` (tensor parallelism), ``loading`` (every model);
  two generation modules serve only the layer kinds they name (sliding-window and recurrent caches);
- TRL's fixes belong to the SFT task.

Registering the fixes imports no Transformers submodule (and so prints none of their warnings).
"""

from __future__ import annotations

from hf_neuron.patching import Fix, all_fixes

TASKS = ("generate", "sft")

_TP_PLAN_PREFIX = "transformers.tp_plan."
_MODELS_PACKAGE = "hf_neuron.transformers.models."
_UPSTREAM_MODELS = "transformers.models."

#: Generation modules whose fixes only serve some layer kinds: module -> the config property it needs.
_LAYER_KIND_MODULES = {
    "hf_neuron.transformers.generation.sliding_window_cache": "sliding_window",
    "hf_neuron.transformers.generation.recurrent_cache": "recurrent",
}


def registered_fixes() -> list[Fix]:
    """Every Transformers and TRL fix, declared (not decided: nothing upstream is imported)."""
    import hf_neuron.transformers
    import hf_neuron.trl

    hf_neuron.transformers.register()
    hf_neuron.trl.register()
    return [f for f in all_fixes() if f.library in ("transformers", "trl")]


def fix_model_type(entry: Fix) -> str | None:
    """The ``model_type`` a fix exists for, or None for a fix every architecture of its scope uses."""
    if entry.name.startswith(_TP_PLAN_PREFIX):
        return entry.name[len(_TP_PLAN_PREFIX):]
    module = entry.apply.__module__
    if module.startswith(_MODELS_PACKAGE):
        leaf = module[len(_MODELS_PACKAGE):].split(".")[0]
        if not leaf.startswith("_"):
            return leaf
        waits = entry.waits_for or ""
        if waits.startswith(_UPSTREAM_MODELS):
            return waits[len(_UPSTREAM_MODELS):].split(".")[0]
    return None


def fix_scope(entry: Fix) -> str:
    """``"model"``, ``"generation"``, ``"training"``, ``"tensor_parallel"``, ``"loading"`` or ``"trl"``."""
    if fix_model_type(entry) is not None:
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
    return [f for f in registered_fixes() if fix_model_type(f) == model_type]


def layer_kinds(config) -> set[str]:
    """``{"sliding_window", "recurrent"}``, or part of it: the layer kinds of ``config``'s text decoder."""
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
    return kinds


def fixes_for(config, task: str = "generate", tp: int = 1) -> list[Fix]:
    """The fixes a ``task`` ("generate" or "sft") of the model of ``config`` at tensor-parallel size
    ``tp`` relies on: its architecture's own, then those of the capabilities the task uses."""
    if task not in TASKS:
        raise ValueError(f"task {task!r}: use one of {', '.join(TASKS)}")
    kinds = layer_kinds(config)
    wanted = {"loading", "generation" if task == "generate" else "training"}
    if task == "sft":
        wanted.add("trl")
    if tp > 1:
        wanted.add("tensor_parallel")
    own, shared = [], []
    for entry in registered_fixes():
        scope = fix_scope(entry)
        if scope == "model":
            if fix_model_type(entry) == config.model_type:
                own.append(entry)
            continue
        needed_kind = _LAYER_KIND_MODULES.get(entry.apply.__module__)
        if scope in wanted and (needed_kind is None or needed_kind in kinds):
            shared.append(entry)
    return own + shared


__all__ = ["TASKS", "fix_model_type", "fix_scope", "fixes_for", "layer_kinds", "model_fixes", "registered_fixes"]
