"""Static caches allocated before the first forward with the key/value heads Falcon writes.

Generation with chunked prefill (hf_neuron's Neuron default) compiles the prefill, so Transformers
allocates ("early-initialises") the static cache before the first forward, from the key/value head
count it reads off the config's ``num_key_value_heads``. Falcon keeps its count under its own name
and rule: ``num_kv_heads`` per layer in the new decoder architecture (Falcon-40B, -180B), one shared
head in the original multi-query one (Falcon-7B). The cache is allocated with every attention head
and the first write raises (``index_copy_(): Source/destination tensor must have same slice
shapes``): generate of a Falcon checkpoint fails on Neuron.
"""

from __future__ import annotations

import types

from hf_neuron.patching import fix, wrap

FIX_NAME = "static-cache-falcon-kv-heads"


def falcon_kv_heads(config) -> int | None:
    """The key/value heads per layer Falcon's attention produces, or None for another architecture."""
    if getattr(config, "model_type", None) != "falcon":
        return None
    if config.new_decoder_architecture or not config.multi_query:
        return int(config.num_kv_heads)
    return 1


def _init_shape_with_falcon_heads(original, self):
    shape = original(self)
    heads = falcon_kv_heads(self.config.get_text_config(decoder=True))
    if shape is None or heads is None or (getattr(self, "_tp_size", None) or 1) > 1:
        return shape  # Falcon has no tensor-parallel plan: a sharded Falcon keeps upstream's shape
    return heads, shape[1]


#: Falcon-7B (multi-query: one key/value head), Falcon-40B (new decoder architecture: ``num_kv_heads``),
#: and the multi-head original (every head).
_FALCON_VARIANTS = (
    {"multi_query": True, "new_decoder_architecture": False},
    {"new_decoder_architecture": True, "num_kv_heads": 2},
    {"multi_query": False, "new_decoder_architecture": False},
)


def _cache_ignores_falcon_kv_heads() -> bool:
    from transformers import FalconConfig
    from transformers.generation.utils import GenerationMixin

    for variant in _FALCON_VARIANTS:
        config = FalconConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, **variant)
        shape = GenerationMixin._get_static_cache_init_shape(types.SimpleNamespace(config=config))
        if shape is not None and shape[0] != falcon_kv_heads(config):
            return True
    return False


@fix(FIX_NAME, "transformers", _cache_ignores_falcon_kv_heads, waits_for="transformers.generation.utils")
def patch_falcon_cache_heads() -> None:
    """Falcon's static cache is allocated with every attention head instead of its key/value heads,
    so generation with chunked prefill fails on its first cache write.

    Detected by asking Transformers for the early-initialisation shape of Falcon configs of each
    attention variant (one key/value head, ``num_kv_heads``, every head): releases whose Falcon config
    states its key/value heads as ``num_key_value_heads`` close the gap. Patch: the shape's head count
    follows Falcon's rule.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(FIX_NAME, GenerationMixin, "_get_static_cache_init_shape", _init_shape_with_falcon_heads)
