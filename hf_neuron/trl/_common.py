"""Small helpers shared by the TRL fixes: where TRL's classes live, and patching them in place."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from typing import Any, Callable

from hf_neuron._import_hooks import when_imported

logger = logging.getLogger("hf_neuron")

# TRL's trainers that pad batches, by config module -> config class (TRL >= 1.10 ships all of them).
CONFIG_CLASSES: dict[str, str] = {
    "trl.trainer.sft_config": "SFTConfig",
    "trl.trainer.dpo_config": "DPOConfig",
    "trl.trainer.grpo_config": "GRPOConfig",
    "trl.trainer.rloo_config": "RLOOConfig",
    "trl.trainer.kto_config": "KTOConfig",
    "trl.trainer.reward_config": "RewardConfig",
    "trl.trainer.distillation_config": "DistillationConfig",
}

TRAINER_MODULES = (
    "trl.trainer.sft_trainer",
    "trl.trainer.dpo_trainer",
    "trl.trainer.grpo_trainer",
    "trl.trainer.rloo_trainer",
    "trl.trainer.kto_trainer",
    "trl.trainer.reward_trainer",
    "trl.trainer.distillation_trainer",
)

BASE_TRAINER_MODULE = "trl.trainer.base_trainer"
UTILS_MODULE = "trl.trainer.utils"

_pending: dict[str, list[Callable[[Any], None]]] = {}
_pending_lock = threading.RLock()


class _NotifyingSpec(importlib.machinery.ModuleSpec):
    """A module spec that runs the pending callbacks of its module when its import completes.

    ``importlib._bootstrap._load_unlocked`` sets ``spec._initializing = False`` right after the module
    body has run (and the module is in ``sys.modules``, unless the import failed).
    """

    @property
    def _initializing(self):
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value):
        self.__dict__["_initializing"] = value
        if value:
            return
        self.__class__ = importlib.machinery.ModuleSpec
        with _pending_lock:
            callbacks = _pending.pop(self.name, [])
        module = sys.modules.get(self.name)
        if module is None:
            return  # the import failed: nothing to patch
        for callback in callbacks:
            callback(module)


def when_ready(module_name: str, callback: Callable[[Any], None]) -> None:
    """Like ``when_imported``, but never hands over a module whose body is still running.

    The adapters are activated from ``import torch``, which a TRL module may be the one importing
    (``from trl import SFTConfig`` first imports ``trl.trainer.sft_config``, which imports torch): its
    classes do not exist yet at that point, so the callback waits for the end of its import.
    """

    def call(module) -> None:
        spec = getattr(module, "__spec__", None)
        waitable = type(spec) in (importlib.machinery.ModuleSpec, _NotifyingSpec)
        if waitable and getattr(spec, "_initializing", False):
            with _pending_lock:
                _pending.setdefault(module_name, []).append(callback)
                spec.__class__ = _NotifyingSpec
            return
        callback(module)  # imported (or a spec we cannot watch: best effort now)

    when_imported(module_name, call)


# The marker our wrappers leave on what they wrap, so re-applying a fix never wraps twice.
PATCHED = "__hf_neuron_patched__"


def module_path(module_name: str) -> str | None:
    """The source file of a module, found without importing it or its parent packages."""
    top, *rest = module_name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing else gets imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return spec.origin
    base = next(iter(spec.submodule_search_locations or []), None)
    if base is None:
        return None
    candidate = os.path.join(base, *rest)
    for path in (candidate + ".py", os.path.join(candidate, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


@functools.lru_cache(maxsize=None)
def module_ast(module_name: str) -> ast.Module | None:
    """The parsed source of a module, without importing it (None when it does not exist)."""
    path = module_path(module_name)
    if path is None or not path.endswith(".py"):
        return None
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


def class_field_default(module_name: str, class_name: str, field_name: str) -> Any:
    """The literal default of a dataclass field as written in the class body.

    Returns ``dataclasses.MISSING`` when the class or the field is absent, and ``...`` when the
    default is not a literal.
    """
    tree = module_ast(module_name)
    if tree is None:
        return dataclasses.MISSING
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if stmt.target.id != field_name or stmt.value is None:
                continue
            value = stmt.value
            if isinstance(value, ast.Call):  # field(default=...)
                for kw in value.keywords:
                    if kw.arg == "default":
                        value = kw.value
                        break
                else:
                    return ...
            try:
                return ast.literal_eval(value)
            except ValueError:
                return ...
    return dataclasses.MISSING


def function_source_mentions(module_name: str, function_name: str, text: str) -> bool | None:
    """Whether the source of a module-level function contains ``text`` (None: function not found)."""
    tree = module_ast(module_name)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function_name:
            return text in ast.unparse(node)
    return None


def is_patched(obj: Any) -> bool:
    return getattr(obj, PATCHED, False)


def mark_patched(wrapper: Callable, original: Callable) -> Callable:
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, PATCHED, True)
    return wrapper


def set_parameter_default(function: Callable, name: str, value: Any) -> bool:
    """Change the default value of parameter ``name`` of a plain Python function in place."""
    code = function.__code__
    kwdefaults = function.__kwdefaults__
    if kwdefaults and name in kwdefaults:
        kwdefaults[name] = value
        return True
    positional = code.co_varnames[: code.co_argcount]
    defaults = function.__defaults__ or ()
    if name not in positional:
        return False
    index = positional.index(name) - (len(positional) - len(defaults))
    if index < 0:
        return False
    function.__defaults__ = defaults[:index] + (value,) + defaults[index + 1 :]
    return True


def device_type_of(args: Any) -> str | None:
    """The device type a TrainingArguments trains on (None when it cannot be told)."""
    try:
        return args.device.type
    except Exception:  # never let a probe break the user's config
        return None
