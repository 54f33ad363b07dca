"""MVP: compiled generation with learned positions counted from the static cache's length.

MVP's decoder (``MvpForCausalLM``) makes its learned positions with an ``arange`` starting at the
cache's length, a tensor with a static cache: see :mod:`._cache_length_positions`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.models._cache_length_positions import length_breaks_the_graph, positions_from_tensor_length

FIX_NAME = "mvp-positions-from-cache-length"
MVP_MODULE = "transformers.models.mvp.modeling_mvp"


def _positions_break_the_graph() -> bool:
    from transformers.models.mvp.modeling_mvp import MvpLearnedPositionalEmbedding

    return length_breaks_the_graph(MvpLearnedPositionalEmbedding, torch.zeros(1, 2, dtype=torch.long))


@fix(FIX_NAME, "transformers", _positions_break_the_graph, waits_for=MVP_MODULE)
def patch_mvp_positions() -> None:
    """MVP's decoder does not trace into one graph per generation step, so generate runs it eagerly.

    Gap: ``MvpLearnedPositionalEmbedding`` makes positions as ``arange(length, length + tokens)``
    from the cache's length, a 0-d tensor for a static cache: a size Dynamo cannot know. Detected by
    tracing upstream's embedding with a tensor length. Patch: given a tensor length and no positions,
    the embedding gets ``arange(tokens) + length`` (the same positions, a static size).
    """
    from transformers.models.mvp.modeling_mvp import MvpLearnedPositionalEmbedding

    wrap(FIX_NAME, MvpLearnedPositionalEmbedding, "forward",
         positions_from_tensor_length(MvpLearnedPositionalEmbedding))


__all__ = ["FIX_NAME"]
