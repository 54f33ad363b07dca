"""Compilation defaults for TRL trainers on Neuron, applied when a trainer is created.

- ``trl.static_shapes_on_neuron``: after a second input shape, Dynamo's ``automatic_dynamic_shapes``
  recompiles the graph with symbolic sizes, which the Neuron backend rejects (it compiles static
  shapes only). Training recipes for Neuron turn it off by hand; hf_neuron turns it off when a TRL
  trainer compiles on Neuron, unless the user set it (in Python or through
  ``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES``).
- ``trl.neuron_compile_hint``: without ``torch_compile`` the Trainer runs eagerly, the slow path on
  Neuron; nothing says so. hf_neuron logs a one-line hint (main process, once).
"""

from __future__ import annotations

import logging
import os

from hf_neuron.patching import fix, when_imported, wrap
from hf_neuron.patching.sources import module_mentions
from hf_neuron.trl._common import BASE_TRAINER_MODULE, device_type_of

logger = logging.getLogger("hf_neuron")

DYNAMIC_SHAPES_ENV = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"
COMPILE_HINT = (
    "hf_neuron: training on Neuron without torch.compile runs eagerly (the slow path); pass "
    "--torch_compile true (or torch_compile=True in the config) to compile with the 'neuron' backend."
)

STATIC_SHAPES_FIX = "trl.static_shapes_on_neuron"
COMPILE_HINT_FIX = "trl.neuron_compile_hint"

_hint_logged = False


def _base_trainer_mentions(text: str) -> bool:
    mentions = module_mentions(BASE_TRAINER_MODULE, text)
    return True if mentions is None else mentions  # no base trainer to patch: nothing we can do


def _user_set_automatic_dynamic_shapes() -> bool:
    import torch._dynamo.config as dynamo_config

    if DYNAMIC_SHAPES_ENV in os.environ:
        return True
    is_default = getattr(dynamo_config, "_is_default", None)
    if is_default is None:
        return dynamo_config.automatic_dynamic_shapes is not True
    return not is_default("automatic_dynamic_shapes")


def static_shapes_hook(trainer) -> None:
    args = trainer.args
    if not getattr(args, "torch_compile", False) or device_type_of(args) != "neuron":
        return
    import torch._dynamo.config as dynamo_config

    if not dynamo_config.automatic_dynamic_shapes or _user_set_automatic_dynamic_shapes():
        return
    dynamo_config.automatic_dynamic_shapes = False
    logger.info(
        "hf_neuron: torch._dynamo.config.automatic_dynamic_shapes=False for Neuron training (the backend "
        "compiles static shapes only); set it yourself to change this."
    )


def compile_hint_hook(trainer) -> None:
    global _hint_logged
    args = trainer.args
    if _hint_logged or getattr(args, "torch_compile", False) or device_type_of(args) != "neuron":
        return
    _hint_logged = True
    if getattr(args, "process_index", 0) == 0:
        logger.warning(COMPILE_HINT)


def _after_init(fix_name: str, hook):
    """Run ``hook(trainer)`` after TRL's base trainer ``__init__``, as the change of ``fix_name``."""

    def __init__(original, self, *args, **kwargs):
        original(self, *args, **kwargs)
        hook(self)

    def patch(module) -> None:
        cls = getattr(module, "_BaseTrainer", None)
        if cls is not None:
            wrap(fix_name, cls, "__init__", __init__)

    when_imported(BASE_TRAINER_MODULE, patch)


@fix(STATIC_SHAPES_FIX, "trl", lambda: not _base_trainer_mentions("automatic_dynamic_shapes"))
def install_static_shapes() -> None:
    """TRL leaves Dynamo's `automatic_dynamic_shapes` on, so the second batch shape of a compiled Neuron
    run recompiles with symbolic sizes, which the Neuron backend rejects. hf_neuron turns it off when a
    TRL trainer compiles on Neuron, unless the user set it.

    Detected from TRL's base trainer source (it never mentions `automatic_dynamic_shapes`) and, at
    trainer creation, from the Dynamo config (left at its default).
    """
    _after_init(STATIC_SHAPES_FIX, static_shapes_hook)


@fix(COMPILE_HINT_FIX, "trl", lambda: not _base_trainer_mentions("torch_compile"))
def install_compile_hint() -> None:
    """Nothing tells a Neuron user that training without `torch_compile` is the slow (eager) path.
    hf_neuron logs a one-line hint when a TRL trainer is created on Neuron with `torch_compile` off.

    Detected from TRL's base trainer source: it never looks at `torch_compile`.
    """
    _after_init(COMPILE_HINT_FIX, compile_hint_hook)
