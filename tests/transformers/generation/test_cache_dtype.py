"""A static cache allocated in float32 (chunked prefill allocates it ahead, in the model's dtype) takes
the bfloat16 values of a mixed-precision forward and holds exactly what a dynamic cache holds."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer, StaticLayer

from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers.generation.cache_dtype import FIX_NAME


def _states(dtype, seed):
    return torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _float32_static_layer():
    layer = StaticLayer(max_cache_len=8)
    layer.lazy_initialization(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # as early_initialization does
    return layer


def test_mixed_precision_states_fill_a_float32_cache_exactly():
    keys, values = _states(torch.float32, 0), _states(torch.bfloat16, 1)  # Qwen3 under autocast: fp32 k, bf16 v
    cached_keys, cached_values = _float32_static_layer().update(keys, values)
    dynamic_keys, dynamic_values = DynamicLayer().update(keys, values)
    assert torch.equal(cached_keys[:, :, :3], dynamic_keys)
    assert torch.equal(cached_values[:, :, :3].to(torch.bfloat16), dynamic_values), "widening is exact"


def test_upstream_rejects_them():
    with upstream_behaviour(FIX_NAME), pytest.raises(RuntimeError, match="same dtype"):
        _float32_static_layer().update(_states(torch.float32, 0), _states(torch.bfloat16, 1))
