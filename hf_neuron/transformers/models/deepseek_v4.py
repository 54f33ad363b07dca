"""DeepSeek V4: a lightning indexer that records no autograd ops for a result that has no gradient.

The indexer returns the indices of the blocks each query attends to, so no gradient reaches its
projections in an eager training step; a compiled step gives them gradients of zeros instead, which an
optimizer applies (weight decay, moment updates). The same reasoning as Qwen4-Exp's static indexer
(:mod:`.qwen4_exp`).
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, original, wrap

DEEPSEEK_V4_FIX = "deepseek-v4-indexer-without-gradients"
DEEPSEEK_V4_MODULE = "transformers.models.deepseek_v4.modeling_deepseek_v4"


def _without_autograd(original_fn, self, *args, **kwargs):
    with torch.no_grad():
        return original_fn(self, *args, **kwargs)


def _deepseek_v4_indexer_records_autograd() -> bool:
    """Whether upstream's DeepSeek V4 indexer, run with autograd on, records its projections for a
    backward pass although its result is integer block indices."""
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Indexer

    config = DeepseekV4Config(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                              q_lora_rank=8, index_n_heads=2, index_head_dim=8, index_topk=2,
                              compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4})
    indexer = DeepseekV4Indexer(config)
    recorded = []
    indexer.kv_proj.register_forward_hook(lambda module, inputs, output: recorded.append(output.requires_grad))
    with torch.enable_grad():
        selected = original(DeepseekV4Indexer, "forward")(indexer, torch.randn(1, 4, 16), torch.randn(1, 4, 8),
                                                          torch.arange(4)[None], None, 0)
    if selected.is_floating_point() or not recorded:
        raise RuntimeError("DeepSeek V4's indexer no longer returns integer indices from its projections")
    return recorded[0]


@fix(DEEPSEEK_V4_FIX, "transformers", _deepseek_v4_indexer_records_autograd, waits_for=DEEPSEEK_V4_MODULE)
def patch_deepseek_v4_indexer_without_gradients() -> None:
    """DeepSeek V4's compiled training step gives its indexer gradients of zeros where eager gives none.

    Gap: the lightning indexer returns the indices of the blocks each query attends to, so no gradient
    reaches its projections in an eager step (``None``); its ops are still recorded for autograd, and
    a compiled step then returns zero gradients for them, which an optimizer applies (weight decay,
    moment updates) where eager training leaves them untouched. Detected by running upstream's
    indexer of a tiny config with autograd on and finding its key projection recorded. Patch: the
    indexer runs without autograd; its result, integer indices, is the same.
    """
    import importlib

    module = importlib.import_module(DEEPSEEK_V4_MODULE)
    wrap(DEEPSEEK_V4_FIX, module.DeepseekV4Indexer, "forward", _without_autograd)


__all__ = ["DEEPSEEK_V4_FIX"]
