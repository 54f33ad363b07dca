"""Compilation defaults for TRL trainers on Neuron, applied when a trainer is created.

- ``trl.static_shapes_on_neuron``: after a second input shape, Dynamo's ``automatic_dynamic_shapes``
  recompiles the graph with symbolic sizes, which the Neuron backend rejects (it compiles static
  shapes only). Training recipes for Neuron turn it off by hand; hf_neuron turns it off when a TRL
  trainer compiles on Neuron, unless the user set it (in Python or through
  ``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES``).
- ``trl.neuron_compile_hint``: without ``torch_compile`` the Trainer runs eagerly, the slow path on
  Neuron; nothing says so. hf_neuron logs a one-line hint (main process, once).
- ``trl.compiled_generation_on_neuron``: the online trainers (GRPO, RLOO, distillation) generate with
  ``disable_compile=True``, so their in-loop generation runs eagerly on Neuron. hf_neuron lets it
  compile there: with the static cache and chunked prefill of the Transformers adapter, one graph
  per prefill bucket the prompts use, plus the decode graph, per batch size.
"""

from __future__ import annotations

import logging
import os

from hf_neuron.patching import fix, when_imported, wrap
from hf_neuron.patching.sources import module_mentions
from hf_neuron.devices import trains_on_neuron
from hf_neuron.trl._common import BASE_TRAINER_MODULE

logger = logging.getLogger("hf_neuron")

DYNAMIC_SHAPES_ENV = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"
COMPILE_HINT = (
    "hf_neuron: training on Neuron without torch.compile runs eagerly (the slow path); pass "
    "--torch_compile true (or torch_compile=True in the config) to compile with the 'neuron' backend."
)

STATIC_SHAPES_FIX = "trl.static_shapes_on_neuron"
COMPILE_HINT_FIX = "trl.neuron_compile_hint"
GENERATION_FIX = "trl.compiled_generation_on_neuron"
# The online trainers whose in-loop generation turns compilation off: module -> trainer class.
GENERATING_TRAINERS = {
    "trl.trainer.grpo_trainer": "GRPOTrainer",
    "trl.trainer.rloo_trainer": "RLOOTrainer",
    "trl.trainer.distillation_trainer": "DistillationTrainer",
}

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
    if not getattr(args, "torch_compile", False) or not trains_on_neuron(args):
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
    if _hint_logged or getattr(args, "torch_compile", False) or not trains_on_neuron(args):
        return
    _hint_logged = True
    if getattr(args, "process_index", 0) == 0:
        logger.warning(COMPILE_HINT)


def compiled_generation_hook(trainer) -> None:
    generation_config = getattr(trainer, "generation_config", None)
    if (
        generation_config is None
        or not getattr(generation_config, "disable_compile", False)
        or getattr(trainer.args, "use_vllm", False)
        or not trains_on_neuron(trainer.args)
    ):
        return
    generation_config.disable_compile = False
    logger.info("hf_neuron: %s generates with compilation on Neuron", type(trainer).__name__)


def _after_init(fix_name: str, hook, module_name: str = BASE_TRAINER_MODULE, class_name: str = "_BaseTrainer"):
    """Run ``hook(trainer)`` after ``class_name.__init__`` (TRL's base trainer by default), as the change
    of ``fix_name``."""

    def __init__(original, self, *args, **kwargs):
        original(self, *args, **kwargs)
        hook(self)

    def patch(module) -> None:
        cls = getattr(module, class_name, None)
        if cls is not None:
            wrap(fix_name, cls, "__init__", __init__)

    when_imported(module_name, patch)


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


def _online_trainers_disable_compile() -> bool:
    mentions = [module_mentions(name, "disable_compile=True") for name in GENERATING_TRAINERS]
    if all(m is None for m in mentions):
        raise RuntimeError("no TRL online trainer module found")
    return any(mentions)


@fix(GENERATION_FIX, "trl", _online_trainers_disable_compile)
def install_compiled_generation() -> None:
    """GRPO, RLOO and distillation generate with ``disable_compile=True`` (and reject the option in
    ``generation_kwargs``): on Neuron their in-loop generation is the eager path at every step.

    Detected from those trainers' source. Patch: on Neuron (without vLLM), the trainer's generation config
    compiles, so generation uses the bounded graph set of the Transformers adapter.
    """
    for module_name, class_name in GENERATING_TRAINERS.items():
        _after_init(GENERATION_FIX, compiled_generation_hook, module_name, class_name)
