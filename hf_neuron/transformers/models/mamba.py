"""Mamba: prefill chunks that continue from the cached recurrent state.

The full-sequence selective scan of Mamba starts from a zero state, so every prefill chunk after the
first forgets what the chunks before it left in the cache (wrong tokens from chunked generation).
With this fix and the recurrent-cache fixes of :mod:`hf_neuron.transformers.generation.recurrent_cache`,
Mamba generates compiled in one prefill-chunk graph and one decode graph per batch size. Falcon-Mamba
has its own copy of the mixer and scan (:mod:`.falcon_mamba`), patched by the same functions.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, upstream_behaviour, wrap
from hf_neuron.transformers.generation.steps import cache_keyword

MAMBA_SCAN_FIX = "mamba-chunk-scan-initial-state"
MAMBA_MODULE = "transformers.models.mamba.modeling_mamba"


# The cached recurrent state the running mixer's full-sequence scan continues from (None: from zero).
# A plain global, set and read inside the compiled forward: Dynamo tracks the store.
_scan_initial_state = None


def _mixer_forward_passing_state(original_fn, self, hidden_states, *args, **kwargs):
    global _scan_initial_state
    cache = kwargs.get("cache", args[0] if args else None)
    state = None
    if cache is not None and hidden_states.shape[1] > 1:
        state = cache.get_recurrent_state(self.layer_idx, state_idx=0)
    previous = _scan_initial_state
    _scan_initial_state = state
    try:
        return original_fn(self, hidden_states, *args, **kwargs)
    finally:
        _scan_initial_state = previous


def _scan_from_cached_state(original_fn, hidden_states, dt, A, B, C, *args, **kwargs):
    """Upstream's scan from a zero state, plus what the cached state ``h0`` adds.

    The recurrence ``h_t = a_t * h_{t-1} + b_t`` is linear, so from ``h0`` it is the zero-start
    result plus ``P_t * h0`` with ``P_t = a_1 * ... * a_t = exp(A * cumsum(dt))``: each output gains
    ``C_t . (P_t * h0)`` (gated like the rest, by ``silu(z)``) and the final state ``P_L * h0``.
    """
    initial = _scan_initial_state
    result = original_fn(hidden_states, dt, A, B, C, *args, **kwargs)
    if initial is None:
        return result
    names = ("D", "z", "delta_bias", "delta_softplus", "return_last_state")
    options = dict(zip(names, args))
    options.update({name: kwargs[name] for name in names if name in kwargs})
    z, delta_bias = options.get("z"), options.get("delta_bias")
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if options.get("delta_softplus", False):
        dt = torch.nn.functional.softplus(dt)
    # (batch, channels, time, state): the decay from the start of the chunk to each step.
    decay = torch.exp(A[None, :, None, :] * torch.cumsum(dt.float(), dim=-1)[..., None])
    carried = decay * initial.float()[:, :, None, :]
    added = (carried * C.float().transpose(1, 2)[:, None, :, :]).sum(-1)
    if z is not None:
        added = added * torch.nn.functional.silu(z.float())
    if options.get("return_last_state", False):
        output, state = result
        return output + added.to(output.dtype), state + carried[:, :, -1].to(state.dtype)
    return result + added.to(result.dtype)


def scan_forgets_cached_state(fix_name: str, module_name: str, config_name: str, model_name: str) -> bool:
    """Whether upstream's model, prefilled in two chunks through a cache, differs from one pass."""
    import importlib

    import transformers
    from transformers import DynamicCache

    module = importlib.import_module(module_name)
    config = getattr(transformers, config_name)(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1,
                                                conv_kernel=4, expand=2, time_step_rank=2)
    torch.manual_seed(0)
    model = getattr(module, model_name)(config).eval()
    with torch.no_grad():  # default init keeps the states near zero (1e-4): make the state matter
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2:
                parameter.normal_(std=0.5)
    ids = torch.randint(0, 32, (1, 8))
    with torch.no_grad(), upstream_behaviour(fix_name):
        whole = model(input_ids=ids).logits[:, -1]
        cache = DynamicCache(config=config)
        model(input_ids=ids[:, :4], use_cache=True, **{cache_keyword(): cache})
        chunked = model(input_ids=ids[:, 4:], use_cache=True, **{cache_keyword(): cache}).logits[:, -1]
    return not torch.allclose(whole, chunked, atol=1e-5, rtol=1e-4)


def patch_scan(name: str, module_name: str, mixer_name: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    wrap(name, getattr(module, mixer_name), "forward", _mixer_forward_passing_state)
    wrap(name, module, "mamba_selective_scan", _scan_from_cached_state)


@fix(MAMBA_SCAN_FIX, "transformers",
     lambda: scan_forgets_cached_state(MAMBA_SCAN_FIX, MAMBA_MODULE, "MambaConfig", "MambaForCausalLM"), waits_for=MAMBA_MODULE)
def patch_mamba_scan_initial_state() -> None:
    """Mamba's prefill chunks after the first start from a zero state: chunked generation is wrong.

    Gap: the full-sequence selective scan (any prompt longer than one token) starts its recurrence
    from zero instead of the state the cache holds, so a chunked prefill forgets every chunk but
    the last (logits off by about 0.1 on a tiny model). Detected by prefilling a tiny Mamba in two
    chunks through a cache and comparing with one pass. Patch: the mixer hands its cached state to
    the scan, which adds that state's contribution (see ``_scan_from_cached_state``).
    """
    patch_scan(MAMBA_SCAN_FIX, MAMBA_MODULE, "MambaMixer")


__all__ = ["MAMBA_SCAN_FIX", "patch_scan", "scan_forgets_cached_state"]
