"""RoFormer: compiled generation with rotary positions counted from the static cache's length.

RoFormer's encoder, run as a decoder (``RoFormerForCausalLM``), makes the positions of its sinusoidal
(rotary) table with an ``arange`` starting at the cache's length, a tensor with a static cache: see
:mod:`._cache_length_positions`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.models._cache_length_positions import length_breaks_the_graph, positions_from_tensor_length

FIX_NAME = "roformer-positions-from-cache-length"
ROFORMER_MODULE = "transformers.models.roformer.modeling_roformer"


def _positions_break_the_graph() -> bool:
    from transformers.models.roformer.modeling_roformer import RoFormerSinusoidalPositionalEmbedding

    return length_breaks_the_graph(RoFormerSinusoidalPositionalEmbedding, torch.Size((1, 2)))


@fix(FIX_NAME, "transformers", _positions_break_the_graph, waits_for=ROFORMER_MODULE)
def patch_roformer_positions() -> None:
    """RoFormer as a decoder does not trace into one graph per generation step, so generate runs it eagerly.

    Gap: ``RoFormerSinusoidalPositionalEmbedding`` makes positions as ``arange(length, length +
    tokens)`` from the cache's length, a 0-d tensor for a static cache: a size Dynamo cannot know.
    Detected by tracing upstream's embedding with a tensor length. Patch: given a tensor length and no
    positions, the embedding gets ``arange(tokens) + length`` (the same positions, a static size).
    """
    from transformers.models.roformer.modeling_roformer import RoFormerSinusoidalPositionalEmbedding

    wrap(FIX_NAME, RoFormerSinusoidalPositionalEmbedding, "forward",
         positions_from_tensor_length(RoFormerSinusoidalPositionalEmbedding))


__all__ = ["FIX_NAME"]
