"""``generate-compiles-every-model-type``: generate compiles the forward of every model it decided to compile.

Once ``generate`` has decided to compile (a static cache on a device that compiles), it asks the model
for its compiled forward (``get_compiled_call``). Transformers returns the plain, uncompiled forward for
some model types whatever the decision: Llama 4 (a to-do for its hybrid chunked-attention cache). On
Neuron that silently runs generation eagerly, every op dispatched on its own, although the forward
compiles: with hf_neuron's static cache layers Llama 4 generates the CPU tokens in one prefill-chunk
graph and one decode graph per batch size.
"""

from __future__ import annotations

import types

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, wrap

FIX_NAME = "generate-compiles-every-model-type"
#: A model type upstream is known to skip; the detection asks upstream's own code about it.
_PROBED_MODEL_TYPE = "llama4_text"


class _ReachedTheCompile(Exception):
    """Raised by the detection's stand-in model when upstream goes on to build a compiled forward."""


def _skips_compiling(model_type: str) -> bool:
    """Whether upstream's ``get_compiled_call`` hands a model of ``model_type`` back its uncompiled forward."""
    from transformers import PreTrainedModel

    from hf_neuron.patching import original

    uncompiled = object()

    def reached(*args, **kwargs):
        raise _ReachedTheCompile

    stand_in = types.SimpleNamespace(config=types.SimpleNamespace(model_type=model_type), __call__=uncompiled,
                                     _default_compile_config=reached, generation_config=None)
    try:
        result = original(PreTrainedModel, "get_compiled_call")(stand_in, None)
    except _ReachedTheCompile:
        return False
    if result is uncompiled:
        return True
    raise RuntimeError(f"get_compiled_call returned {type(result).__name__} for a stand-in model")


def _compile_what_upstream_skips(original, self, compile_config):
    compiled = original(self, compile_config)
    if not model_on_neuron(self) or compiled != self.__call__:
        return compiled
    # What upstream does for every other model type: compile the forward once per compile config.
    compile_config = compile_config or self._default_compile_config()
    if getattr(self, "_compiled_call", None) is None or getattr(self, "_last_compile_config", None) != compile_config:
        self._last_compile_config = compile_config
        self._compiled_call = torch.compile(self.__call__, **compile_config.to_dict())
    return self._compiled_call


@fix(FIX_NAME, "transformers", lambda: _skips_compiling(_PROBED_MODEL_TYPE), waits_for="transformers.modeling_utils")
def patch_compiled_call() -> None:
    """Generation of Llama 4 never compiles: ``get_compiled_call`` returns its uncompiled forward.

    Detected by calling upstream's ``get_compiled_call`` for a stand-in model of type ``llama4_text``:
    it returns the stand-in's own forward without building a compile config. Patch: for a model on a
    neuron device, a forward upstream left uncompiled is compiled with the compile config, as upstream
    compiles every other model's forward.
    """
    from transformers import PreTrainedModel

    wrap(FIX_NAME, PreTrainedModel, "get_compiled_call", _compile_what_upstream_skips)
