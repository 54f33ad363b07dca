"""``generate-recompile-limit``: compiled generation keeps compiling past Dynamo's default recompile limit.

Dynamo keeps at most ``torch._dynamo.config.recompile_limit`` (8) graphs per code object, shared by
every ``torch.compile`` of that code, and then runs it eagerly. Compiled generation needs 2 graphs per
(batch size, ``max_cache_len``), and every model's compiled forward is the same code
(``nn.Module.__call__``), so a process that serves a fifth batch size, or a third model, silently drops
to the eager path: on Trainium, every op dispatched and compiled on its own. ``torch.compile`` takes a
per-call ``recompile_limit`` and ``isolate_recompiles``; Transformers' ``get_compiled_call`` passes
neither. For a model on a neuron device hf_neuron compiles the forward with both.
"""

from __future__ import annotations

import inspect
import logging

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, wrap

logger = logging.getLogger("hf_neuron")

FIX_NAME = "generate-recompile-limit"
#: Graphs one model's compiled forward may have: 2 per (batch size, cache length), so 32 of those.
GENERATION_RECOMPILE_LIMIT = 64
_MARK = "_hf_neuron_recompile_limit"


def _dynamo_default_limit() -> int:
    import torch._dynamo.config as config

    return int(config._config["recompile_limit"].default)


def _user_set_the_limit() -> bool:
    # Compared by value: Dynamo patches the limit itself while it compiles a call that has its own
    # limit, which leaves the config's "set by the user" flag on for good.
    import torch._dynamo.config as config

    return int(config.recompile_limit) != _dynamo_default_limit()


def _compiled_call_with_room(original, self, compile_config):
    compiled = original(self, compile_config)
    if (not model_on_neuron(self) or compiled == self.__call__ or getattr(compiled, _MARK, False)
            or _user_set_the_limit()):
        return compiled
    # The config the compiled call was built with (a model class may build its own without recording it).
    used = getattr(self, "_last_compile_config", None) or compile_config
    if used is None:
        return compiled
    options = used.to_dict()
    ours = torch.compile(self.__call__, **options, recompile_limit=GENERATION_RECOMPILE_LIMIT,
                         isolate_recompiles=True)
    setattr(ours, _MARK, True)
    self._compiled_call = ours
    return ours


def _compiled_call_shares_the_default_limit() -> bool:
    from transformers import PreTrainedModel

    parameters = inspect.signature(torch.compile).parameters
    if not {"recompile_limit", "isolate_recompiles"} <= set(parameters):
        raise RuntimeError("this torch.compile takes no per-call recompile_limit / isolate_recompiles")
    _dynamo_default_limit()  # raises where the config cannot tell its default (the user's value must win)
    source = inspect.getsource(PreTrainedModel.get_compiled_call)
    if "_compiled_call" not in source or "_last_compile_config" not in source:
        raise RuntimeError("get_compiled_call no longer keeps `_compiled_call` / `_last_compile_config`")
    # Upstream passes only the CompileConfig's fields (fullgraph, dynamic, backend, mode, options).
    return "recompile_limit" not in source and _dynamo_default_limit() < GENERATION_RECOMPILE_LIMIT


@fix(FIX_NAME, "transformers", _compiled_call_shares_the_default_limit, waits_for="transformers.modeling_utils")
def patch_generation_recompile_limit() -> None:
    """Compiled generation falls back to eager after 4 (batch size, cache length) pairs per process.

    Gap: Transformers compiles a model's forward with Dynamo's global ``recompile_limit`` (8 graphs,
    shared by every model, since all compiled forwards are ``nn.Module.__call__``), fewer than a process
    serving several batch sizes, cache lengths or models compiles (2 each). Detected by the compile
    call of ``get_compiled_call`` passing no limit while the default is below 64. Patch: for a model on a
    neuron device the forward is compiled with ``recompile_limit=64, isolate_recompiles=True`` (its own
    budget), unless the user set ``torch._dynamo.config.recompile_limit``.
    """
    from transformers import PreTrainedModel

    wrap(FIX_NAME, PreTrainedModel, "get_compiled_call", _compiled_call_with_room)
