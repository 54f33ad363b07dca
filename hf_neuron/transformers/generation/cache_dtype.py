"""Static cache under mixed precision: states are stored in the cache's dtype.

Generation with chunked prefill (hf_neuron's Neuron default) allocates the static cache ahead of the
first forward, in the model's parameter dtype. Under mixed precision — Accelerate's ``bf16=True``
wraps the forward of a float32 model in autocast, as in GRPO's in-loop generation — the attention's
values come out in bfloat16 and, in models that normalise keys with a float32 weight (Qwen3's
``k_norm``), the keys in float32: ``index_copy_`` into the float32 cache then raises ("self and
source expected to have the same dtype").

The fix casts incoming key and value states to the dtype of an initialised cache. Widening is exact,
and attention under autocast narrows them back to exactly the values the dynamic cache would hold.
"""

from __future__ import annotations

from hf_neuron.patching import fix, wrap

FIX_NAME = "static-cache-mixed-precision"


def _update_in_cache_dtype(original, self, key_states, value_states, *args, **kwargs):
    if getattr(self, "is_initialized", False):
        keys, values = getattr(self, "keys", None), getattr(self, "values", None)
        if keys is not None and key_states.dtype != keys.dtype:
            key_states = key_states.to(keys.dtype)
        if values is not None and value_states.dtype != values.dtype:
            value_states = value_states.to(values.dtype)
    return original(self, key_states, value_states, *args, **kwargs)


def _static_cache_rejects_other_dtypes() -> bool:
    import torch
    from transformers.cache_utils import StaticLayer

    layer = StaticLayer(max_cache_len=4)
    layer.lazy_initialization(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))  # float32, as early init
    try:
        layer.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2, dtype=torch.bfloat16))
    except RuntimeError:
        return True
    return False


@fix(FIX_NAME, "transformers", _static_cache_rejects_other_dtypes, waits_for="transformers.cache_utils")
def patch_static_cache_dtype() -> None:
    """A static cache allocated in the model's dtype rejects the bfloat16 values of a mixed-precision
    forward (GRPO's generation with ``bf16=True`` on a float32 model), so generation fails on Neuron,
    where chunked prefill allocates the cache ahead.

    Detected by updating a float32 ``StaticLayer`` with bfloat16 values. Patch: static layers store
    incoming states in their own dtype.
    """
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    for cls in (StaticLayer, StaticSlidingWindowLayer):
        wrap(FIX_NAME, cls, "update", _update_in_cache_dtype)
