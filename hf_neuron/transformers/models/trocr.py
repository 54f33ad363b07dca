"""TrOCR: compiled generation with learned positions counted from the static cache's length.

TrOCR's decoder (``TrOCRForCausalLM``, the text half of the OCR model) makes its learned positions
with an ``arange`` starting at the cache's length, a tensor with a static cache: see
:mod:`._cache_length_positions`.
"""

from __future__ import annotations

import torch

from hf_neuron.transformers.models._cache_length_positions import declare_positions_fix

FIX_NAME = declare_positions_fix(__name__, "trocr", "TrOCRLearnedPositionalEmbedding",
                                 lambda: torch.zeros(1, 2, dtype=torch.long), "TrOCR's decoder")

__all__ = ["FIX_NAME"]
