"""BigBird: a decoder switches to full attention before generation, not inside its first step.

BigBird's block-sparse attention is bidirectional and writes nothing to a cache, so ``BigBirdModel``
switches itself to full attention (``set_attention_type("original_full")``, with a warning) in the
first forward that gets a cache. Under ``generate`` that first forward is the compiled prefill chunk:
the warning and the change of the model's own modules inside it cannot be traced into one graph, so
generate on Neuron runs BigBird eagerly, every op dispatched on its own. Making the same switch when
``generate`` starts gives the same model, switched before anything is traced.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, original, wrap

FIX_NAME = "big-bird-decoder-full-attention-before-generate"
BIG_BIRD_MODULE = "transformers.models.big_bird.modeling_big_bird"
SPARSE, FULL = "block_sparse", "original_full"


def _switches_inside_its_first_cached_forward() -> bool:
    """Whether upstream's BigBird decoder with block-sparse attention changes its attention type
    inside a forward given a cache (a tiny one on CPU)."""
    from transformers import BigBirdConfig, DynamicCache
    from transformers.models.big_bird.modeling_big_bird import BigBirdForCausalLM

    config = BigBirdConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, is_decoder=True,
                           attention_type=SPARSE, block_size=2, num_random_blocks=1)
    model = BigBirdForCausalLM(config).eval()
    if model.bert.attention_type != SPARSE:
        raise RuntimeError("BigBird's decoder no longer keeps block-sparse attention when built with it")
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # the switch's own warning is what this probe expects
    try:
        with torch.no_grad():
            original(BigBirdForCausalLM, "forward")(model, input_ids=torch.ones(1, 4, dtype=torch.long),
                                                    cache=DynamicCache(config=config), use_cache=True)
    finally:
        logging.set_verbosity(verbosity)
    return model.bert.attention_type == FULL


def _full_attention_first(original_fn, self, *args, **kwargs):
    if (self.bert.attention_type == SPARSE and self.config.is_decoder
            and kwargs.get("use_cache", self.generation_config.use_cache) is not False):
        self.bert.set_attention_type(FULL)  # what upstream's first forward with a cache does
    return original_fn(self, *args, **kwargs)


@fix(FIX_NAME, "transformers", _switches_inside_its_first_cached_forward, waits_for=BIG_BIRD_MODULE)
def patch_big_bird_full_attention_before_generate() -> None:
    """BigBird's decoder switches itself to full attention inside its first compiled step, so generate runs it eagerly.

    Gap: a block-sparse ``BigBirdForCausalLM`` given a cache changes its own attention type (and warns)
    inside the forward: the compiled prefill chunk cannot be traced into one graph. Detected by
    running upstream's forward of a tiny block-sparse decoder with a cache and finding its attention
    type changed. Patch: ``generate`` of a block-sparse decoder that will use a cache first makes the
    switch upstream's forward would make (``set_attention_type("original_full")``).
    """
    from transformers.models.big_bird.modeling_big_bird import BigBirdForCausalLM

    wrap(FIX_NAME, BigBirdForCausalLM, "generate", _full_attention_first)


__all__ = ["FIX_NAME"]
