"""MiniMax: the lightning-attention state kept in a transformers cache, so that generation compiles.

MiniMax (``MiniMaxForCausalLM``, MiniMax-Text-01) mixes lightning attention, a linear attention whose
whole history is one ``(heads, head_dim, head_dim)`` state per layer, with full-attention layers.
Upstream keeps both in its own ``MiniMaxCache``, a dynamic cache with a list of states beside it:

- ``generate`` prepares no cache for it (``_supports_default_dynamic_cache`` excludes "minimax" by
  name), so no static cache is ever made and generation runs eagerly, every op on its own;
- its model forward refuses any cache that is not a ``MiniMaxCache`` (``ValueError``);
- its lightning attention reads and writes the state through ``MiniMaxCache``'s own
  ``get_linear_cache`` / ``set_linear_cache``.

A transformers cache built from MiniMax's config already has the right layers: its ``layer_types``
make a linear-attention layer (``LinearAttentionLayer``, a fixed-size recurrent state written in
place) for each lightning layer and a key/value layer for each full-attention layer, static in a
``StaticCache``. The fix lets MiniMax use it: generate prepares it as for any model, and the
lightning attention keeps its state as the layer's recurrent state. Generation then follows the
path of the other hybrid linear-attention models (Qwen3-Next): the states are allocated ahead as
zeros (``static-cache-allocate-every-layer``) and generate compiles one prefill-chunk graph and one
decode graph per batch size, with the tokens of upstream's eager generation.

A zero state allocated ahead makes every forward take the lightning attention's token-by-token path
(the one upstream takes for every forward after the first) rather than its block-wise path from no
state: the two compute the same recurrence, ``state = decay * state + k^T v``, ``out = q @ state``.
A ``MiniMaxCache`` a user passes keeps upstream's behaviour.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, upstream_behaviour, wrap
from hf_neuron.transformers.generation.steps import CACHE_KEYWORDS, cache_keyword, generation_cache

MINIMAX_CACHE_FIX = "minimax-state-in-transformers-cache"
MINIMAX_MODULE = "transformers.models.minimax.modeling_minimax"

#: The lightning attention keeps one state per layer, the first (and only) state of its cache layer.
STATE_INDEX = 0


class LinearAttentionStates:
    """What MiniMax's lightning attention asks of its cache, answered by a transformers cache.

    ``get_linear_cache`` gives the layer's recurrent state, or None before the layer has one (the
    attention then starts from a zero state, block by block); ``set_linear_cache`` copies the new
    state into the layer's tensor (the same tensor at every step, which a compiled step needs) and
    counts the forward's tokens, as a linear-attention layer's length (Transformers 5.25 and later
    read a cache's length from its first layer, which is a lightning layer in MiniMax-Text-01).
    """

    def __init__(self, cache, tokens: int):
        self.cache, self.tokens = cache, tokens

    def get_linear_cache(self, layer_idx: int):
        return self.cache.get_recurrent_state(layer_idx, STATE_INDEX)

    def set_linear_cache(self, layer_idx: int, state: torch.Tensor) -> None:
        layer = self.cache.layers[layer_idx]
        self.cache.update_recurrent_state(state, layer_idx, STATE_INDEX)
        count = getattr(layer, "cumulative_length_linear", None)
        if isinstance(count, torch.Tensor):
            count.add_(self.tokens)
        # Upstream sets this flag when a convolution state is written; MiniMax has none.
        layer.has_previous_state[STATE_INDEX] = True


def _tiny_minimax():
    """A two-layer MiniMax (a lightning layer first, as in MiniMax-Text-01) for the detector."""
    from transformers import MiniMaxConfig
    from transformers.models.minimax.modeling_minimax import MiniMaxForCausalLM

    config = MiniMaxConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_local_experts=2,
                           num_experts_per_tok=1, block_size=4, layer_types=["linear_attention", "full_attention"])
    torch.manual_seed(0)
    return MiniMaxForCausalLM(config).eval()


def _minimax_keeps_its_own_cache() -> bool:
    """Whether upstream's MiniMax generates without a transformers cache: generate prepares none for
    it, or its forward refuses a static cache built from its config, or leaves the lightning state
    out of the cache's linear-attention layer."""
    from transformers import StaticCache
    from transformers.models.minimax.modeling_minimax import MiniMaxForCausalLM

    with upstream_behaviour(MINIMAX_CACHE_FIX):
        if not MiniMaxForCausalLM._supports_default_dynamic_cache():
            return True
        model = _tiny_minimax()
        cache = StaticCache(config=model.config, max_cache_len=8)
        if not isinstance(getattr(cache.layers[0], "recurrent_states", None), dict):
            raise RuntimeError("a static cache for MiniMax has no linear-attention layer: the probe no longer applies")
        try:
            with torch.no_grad():
                model(input_ids=torch.ones(1, 4, dtype=torch.long), use_cache=True, **{cache_keyword(): cache})
        except (ValueError, AttributeError):
            return True
        return cache.layers[0].recurrent_states[STATE_INDEX] is None


@fix(MINIMAX_CACHE_FIX, "transformers", _minimax_keeps_its_own_cache, waits_for=MINIMAX_MODULE)
def patch_minimax_state_in_transformers_cache() -> None:
    """MiniMax generates eagerly on Neuron: it keeps its lightning-attention state in its own dynamic
    cache class, so generate never makes it a static cache to compile with.

    Gap: ``generate`` prepares no cache for MiniMax (excluded by name from the default caches); the
    model makes its own ``MiniMaxCache`` and refuses any other cache (``ValueError``), and its
    lightning attention reads and writes its state through that class's own methods. Detected by
    asking upstream's ``_supports_default_dynamic_cache`` and, should it allow MiniMax, by running a
    tiny MiniMax with a static cache built from its config. Patch: generate prepares MiniMax's cache
    as any model's; a model forward given a transformers cache skips the ``MiniMaxCache`` check, and
    the lightning attention keeps its state as the recurrent state of the cache's linear-attention
    layer. A ``MiniMaxCache`` passed by the caller keeps upstream's behaviour.
    """
    import importlib

    module = importlib.import_module(MINIMAX_MODULE)
    from transformers.cache_utils import Cache

    def transformers_cache(cache) -> bool:
        return isinstance(cache, Cache) and not isinstance(cache, module.MiniMaxCache)

    def supports_default_cache(original_fn, cls) -> bool:
        return True  # the model takes a transformers cache with the two wrappers below

    def model_forward(original_fn, self, *args, **kwargs):
        if transformers_cache(generation_cache(kwargs)):
            # Upstream's forward reads ``use_cache`` for one decision only: make a MiniMaxCache when
            # given no cache, refuse a cache of another class. Its layers write into the cache they
            # are given whatever ``use_cache`` says, and the output carries it.
            kwargs["use_cache"] = False
        return original_fn(self, *args, **kwargs)

    def lightning_attention_forward(original_fn, self, *args, **kwargs):
        for key in CACHE_KEYWORDS:
            if transformers_cache(kwargs.get(key)):
                hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
                kwargs[key] = LinearAttentionStates(kwargs[key], hidden_states.shape[1])
        return original_fn(self, *args, **kwargs)

    wrap(MINIMAX_CACHE_FIX, module.MiniMaxForCausalLM, "_supports_default_dynamic_cache", supports_default_cache)
    wrap(MINIMAX_CACHE_FIX, module.MiniMaxModel, "forward", model_forward)
    wrap(MINIMAX_CACHE_FIX, module.MiniMaxLightningAttention, "forward", lightning_attention_forward)


__all__ = ["MINIMAX_CACHE_FIX", "LinearAttentionStates"]
