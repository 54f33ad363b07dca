"""MPT: compiled generation without a data-dependent ALiBi slice.

A static cache keeps its length as a 0-d tensor so that a compiled forward does not guard on a
Python int that changes at every step. MPT's attention adds ``cache.get_seq_length()`` to the chunk
length and slices its ALiBi bias with ``max(0, bias rows - that length)``. The bias has a single row
(ALiBi depends on the key position only), so the slice start is 0 whatever the length, but the
graph cannot know it: every prefill chunk and decode step of MPT fails to trace
(``PendingUnbackedSymbolNotFound``) and generate compiles one graph per piece, about ten per batch
size. Other models whose forward reads the cache length
inside the graph (Inkling) are covered by :mod:`hf_neuron.transformers.generation.sliding_window_cache`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, original, wrap
from hf_neuron.transformers.generation.steps import cache_parameter

MPT_FIX = "mpt-alibi-query-length"


class _CacheWithoutLength:
    """The cache, as MPT's attention sees it for its ALiBi slice: updates go through, the length reads 0.

    Only used when the bias has no more rows than the chunk has tokens, where the slice start,
    ``max(0, rows - (tokens + length))``, is 0 for every length. The attention calls nothing else
    on the cache (checked by the detection's stub, which has nothing else either)."""

    def __init__(self, cache):
        self.cache = cache

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def update(self, *args, **kwargs):
        return self.cache.update(*args, **kwargs)


#: The name MPT's attention takes the cache under, set when the fix is applied.
_MPT_CACHE_PARAMETER: list[str] = []


def _mpt_attention_without_length_read(original_fn, self, hidden_states, position_bias, *args, **kwargs):
    keyword = _MPT_CACHE_PARAMETER[0]
    cache = kwargs.get(keyword)
    if (cache is not None and hidden_states.device.type == "neuron" and isinstance(position_bias, torch.Tensor)
            and position_bias.dim() == 3 and position_bias.shape[1] <= hidden_states.shape[1]):
        kwargs[keyword] = _CacheWithoutLength(cache)
    return original_fn(self, hidden_states, position_bias, *args, **kwargs)


def _mpt_reads_cache_length() -> bool:
    """Whether MPT's attention asks the cache for its length (run on a stub cache, tiny sizes)."""
    from transformers import MptConfig
    from transformers.models.mpt.modeling_mpt import MptAttention, build_mpt_alibi_tensor

    reads = []

    class _Stub:
        def update(self, key_states, value_states, *args, **kwargs):
            return key_states, value_states

        def get_seq_length(self, layer_idx: int = 0):
            reads.append(layer_idx)
            return 0

    config = MptConfig(d_model=8, n_heads=2, n_layers=1, max_seq_len=4, vocab_size=8)
    attention = MptAttention(config, layer_idx=0)
    with torch.no_grad():
        forward = original(MptAttention, "forward")
        forward(attention, torch.zeros(1, 2, 8), build_mpt_alibi_tensor(2, 4), **{cache_parameter(forward): _Stub()})
    return bool(reads)


@fix(MPT_FIX, "transformers", _mpt_reads_cache_length, waits_for="transformers.models.mpt.modeling_mpt")
def patch_mpt_alibi_query_length() -> None:
    """MPT's compiled prefill chunks and decode steps break on a data-dependent ALiBi slice built from
    the static cache's length, so generate compiles about ten graphs per batch size instead of two.

    Gap: ``MptAttention.forward`` slices its one-row ALiBi bias from row ``max(0, 1 - (tokens +
    cache.get_seq_length()))``, always 0, but a tensor-valued length makes it an unknown value in the
    graph. Detected by running the attention on a stub cache and seeing it read the length. Patch
    (MPT's own module: the read is in its attention, not a shared mechanism): on a neuron device,
    when the bias has no more rows than the chunk has tokens, the attention sees a length of 0,
    which gives the same slice; cache updates are unchanged.
    """
    from transformers.models.mpt.modeling_mpt import MptAttention

    # Looked up once here: the wrapper runs inside compiled forwards.
    _MPT_CACHE_PARAMETER[:] = [cache_parameter(MptAttention.forward)]
    wrap(MPT_FIX, MptAttention, "forward", _mpt_attention_without_length_read)


__all__ = ["MPT_FIX"]
