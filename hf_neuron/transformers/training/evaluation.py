"""Evaluation during training runs the compiled model on Neuron.

With ``torch_compile=True`` the Trainer compiles the model it trains (through Accelerate), but the
evaluations it runs during training (``eval_strategy="steps"`` or ``"epoch"``) call the model
uncompiled. On a GPU that is only slower; on Neuron the uncompiled model is the eager path, op by op,
at every evaluation. The fix hands the evaluation loop the compiled model the Trainer already holds,
so the evaluation graphs (forward only) are compiled at the first evaluation and reused by the next
ones; their batches have the training batches' fixed shape (see :mod:`.batches`).
"""

from __future__ import annotations

import inspect

from hf_neuron.devices import trains_on_neuron
from hf_neuron.patching import fix, wrap

FIX_NAME = "trainer-compiled-evaluation"


def _compiled(module) -> bool:
    import torch._dynamo

    return isinstance(module, torch._dynamo.eval_frame.OptimizedModule)


def _evaluate_compiled_on_neuron(original, self, model, training=True, *args, **kwargs):
    wrapped = original(self, model, training, *args, **kwargs)
    if training or _compiled(wrapped) or not getattr(self.args, "torch_compile", False):
        return wrapped
    compiled = getattr(self, "model_wrapped", None)
    if trains_on_neuron(self.args) and _compiled(compiled) and getattr(compiled, "_orig_mod", None) is wrapped:
        return compiled
    return wrapped


def _evaluation_wraps_the_model() -> bool:
    from transformers.trainer import Trainer

    wrap_model = getattr(Trainer, "_wrap_model", None)
    if wrap_model is None or "training" not in inspect.signature(wrap_model).parameters:
        raise RuntimeError("transformers.Trainer._wrap_model(model, training=...) not found")
    # Whether the model evaluation gets is compiled is seen at each evaluation: a compiled one is kept.
    return True


@fix(FIX_NAME, "transformers", _evaluation_wraps_the_model, waits_for="transformers.trainer")
def patch_evaluation_model() -> None:
    """Evaluations during a compiled training run use the uncompiled model: on Neuron, the eager path at
    every evaluation.

    Patch: on Neuron with ``torch_compile``, the model the Trainer prepares for evaluation is the
    compiled model it trains, when it holds one; an evaluation model that is already compiled is kept.
    """
    from transformers.trainer import Trainer

    wrap(FIX_NAME, Trainer, "_wrap_model", _evaluate_compiled_on_neuron)
