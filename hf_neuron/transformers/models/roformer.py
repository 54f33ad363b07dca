"""RoFormer: compiled generation with rotary positions counted from the static cache's length.

RoFormer's encoder, run as a decoder (``RoFormerForCausalLM``), makes the positions of its sinusoidal
(rotary) table with an ``arange`` starting at the cache's length, a tensor with a static cache: see
:mod:`._cache_length_positions`.
"""

from __future__ import annotations

import torch

from hf_neuron.transformers.models._cache_length_positions import declare_positions_fix

FIX_NAME = declare_positions_fix(__name__, "roformer", "RoFormerSinusoidalPositionalEmbedding",
                                 lambda: torch.Size((1, 2)), "RoFormer as a decoder")

__all__ = ["FIX_NAME"]
