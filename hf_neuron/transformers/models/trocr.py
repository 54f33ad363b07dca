"""TrOCR: compiled generation with learned positions counted from the static cache's length.

TrOCR's decoder (``TrOCRForCausalLM``, the text half of the OCR model) makes its learned positions
with an ``arange`` starting at the cache's length, a tensor with a static cache: see
:mod:`._cache_length_positions`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.models._cache_length_positions import length_breaks_the_graph, positions_from_tensor_length

FIX_NAME = "trocr-positions-from-cache-length"
TROCR_MODULE = "transformers.models.trocr.modeling_trocr"


def _positions_break_the_graph() -> bool:
    from transformers.models.trocr.modeling_trocr import TrOCRLearnedPositionalEmbedding

    return length_breaks_the_graph(TrOCRLearnedPositionalEmbedding, torch.zeros(1, 2, dtype=torch.long))


@fix(FIX_NAME, "transformers", _positions_break_the_graph, waits_for=TROCR_MODULE)
def patch_trocr_positions() -> None:
    """TrOCR's decoder does not trace into one graph per generation step, so generate runs it eagerly.

    Gap: ``TrOCRLearnedPositionalEmbedding`` makes positions as ``arange(length, length + tokens)``
    from the cache's length, a 0-d tensor for a static cache: a size Dynamo cannot know. Detected by
    tracing upstream's embedding with a tensor length. Patch: given a tensor length and no positions,
    the embedding gets ``arange(tokens) + length`` (the same positions, a static size).
    """
    from transformers.models.trocr.modeling_trocr import TrOCRLearnedPositionalEmbedding

    wrap(FIX_NAME, TrOCRLearnedPositionalEmbedding, "forward",
         positions_from_tensor_length(TrOCRLearnedPositionalEmbedding))


__all__ = ["FIX_NAME"]
