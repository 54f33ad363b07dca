"""Whether a model's forward traces into one graph per generation step, decided by tracing it.

Transformers marks some model classes ``_can_compile_fullgraph = False``. The flag is a class-wide,
hand-kept note (upstream's own test suite reads it; ``generate`` does not), and it is often stale: the
forward of GPT-Neo, Zamba2, Falcon-H1 or Zaya traces into one graph per step and generates the CPU
tokens compiled, while DBRX's (and LongCat-Flash's before Transformers 5.25) break on data-dependent
expert routing. On Neuron an eager generation dispatches every op on its own (the slow path), and a
forward that breaks into pieces compiles each piece for every step shape, so the flag alone cannot
decide.

``forward_traces_whole(model)`` asks Dynamo: the static cache is allocated ahead as ``generate`` allocates
it on Neuron (every layer's states, or the answer is no), then the prefill-chunk step and the decode step
of a generation are traced with ``fullgraph=True`` into a backend that stops at the captured graph. Nothing
runs (the trace works on fake tensors), nothing is compiled for a device and no Dynamo cache entry is
left behind. The answer is kept per model class and configuration for the process.

The same step inputs serve ``hf-neuron plan``, which traces the steps on the meta device.
"""

from __future__ import annotations

import threading

from hf_neuron.patching.tracing import captured, stop_at_the_graph
from hf_neuron.transformers.generation.steps import generation_step_inputs, generation_steps, step_inputs

#: Tokens of the traced prefill chunk (the graph's structure does not depend on the chunk length).
TRACE_CHUNK = 4

_verdicts: dict[tuple[type, str], tuple[bool, str | None]] = {}
_lock = threading.Lock()


def chunked_prefill_cache(model, batch_size: int, max_cache_len: int, chunk: int, device):
    """The static cache ``generate`` allocates for a compiled chunked prefill, on ``device``."""
    from transformers import StaticCache

    from hf_neuron.patching import get_fix
    from hf_neuron.transformers.generation import cache_allocation
    from hf_neuron.transformers.models import recurrent_gemma, rwkv

    if rwkv.generates_with_state_cache(model):
        return rwkv.state_cache(model, batch_size, device)
    cache = StaticCache(config=model.config.get_text_config(decoder=True), max_cache_len=max_cache_len)
    if get_fix(recurrent_gemma.STATES_FIX).active and recurrent_gemma.keeps_module_states(model):
        recurrent_gemma.allocate_module_states(model, batch_size)  # as generate then allocates them
    shape = model._get_static_cache_init_shape() if hasattr(model, "_get_static_cache_init_shape") else None
    if shape is not None:
        cache.early_initialization(batch_size=batch_size, num_heads=shape[0], head_dim=shape[1],
                                   dtype=model.dtype, device=device)
    # What hf_neuron's cache allocation adds ahead of the first forward (linear- and latent-attention
    # states); left lazy (as generate then does) when it cannot be measured.
    if get_fix(cache_allocation.FIX_NAME).active and cache_allocation.unallocated_layers(cache):
        try:
            measured = cache_allocation.measure_first_forward_states(model, cache, batch_size, chunk)
        except Exception:  # noqa: BLE001
            return cache
        cache_allocation.allocate_measured_states(cache, measured, device)
    return cache


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line[:117] + '...' if len(line) > 120 else line}"


def _trace_steps(model) -> tuple[bool, str | None]:
    import torch._dynamo

    device = next(iter(model.parameters())).device
    try:
        cache = chunked_prefill_cache(model, 1, TRACE_CHUNK + 2, TRACE_CHUNK, device)
    except Exception as exc:  # noqa: BLE001
        return False, f"no static cache can be allocated for it ({_first_line(exc)})"
    from hf_neuron.transformers.generation.cache_allocation import unallocated_layers

    if unallocated_layers(cache):
        # Left to the first compiled chunk, the states are allocated inside the graph: a path the
        # step traces below would not show.
        return False, "its cache states cannot be allocated ahead of the first forward"
    traced = torch.compile(model, backend=stop_at_the_graph, fullgraph=True, dynamic=False)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False), torch.no_grad():
        for start, tokens in generation_steps(TRACE_CHUNK):
            step = "prefill chunk" if tokens > 1 else "decode step"
            try:
                traced(**generation_step_inputs(model, step_inputs(cache, 1, start, tokens, device), first=start == 0))
            except Exception as exc:  # noqa: BLE001 - every failure to capture is the answer
                if not captured(exc):
                    return False, f"its {step} does not trace into one graph ({_first_line(exc)})"
            else:
                return False, f"its {step} ran instead of being traced"
    return True, None


def forward_traces_whole(model) -> tuple[bool, str | None]:
    """``(True, None)`` when the prefill-chunk and decode steps of ``model`` each trace into one graph,
    else ``(False, why)``. Decided once per model class and configuration for the process."""
    key = (type(model), model.config.to_json_string(use_diff=True))
    with _lock:
        if key not in _verdicts:
            _verdicts[key] = _trace_steps(model)
        return _verdicts[key]
