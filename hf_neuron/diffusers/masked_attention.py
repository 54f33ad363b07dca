"""Mochi's joint attention keeps only the valid prompt tokens with static shapes on Neuron.

``MochiAttnProcessor2_0`` loops over the batch and, for each sample, selects the prompt tokens its
``attention_mask`` marks valid (``torch.nonzero``), concatenates them after the video tokens, runs
attention over that variable-length sequence and pads the result back with zeros: the valid prompt
tokens' outputs first, in order, then zeros. Both the selection and the per-sample length are data, so
``compile_repeated_blocks(fullgraph=True)`` fails on Mochi's blocks.

Here, for tensors on a neuron device, the processor attends over the whole joint sequence with a boolean
key mask that hides the invalid prompt tokens (the same softmax: masked keys weigh exactly zero), then
moves each valid prompt token's output to the slot upstream gives it (its rank among the valid tokens)
with a 0/1 permutation matrix, which leaves zeros in the remaining slots. Every shape follows the input
shapes alone. Invalid prompt tokens still see every video token, so no query row is fully masked.

On any other device upstream's processor runs unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_neuron.devices import is_neuron
from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.tracing import traces_whole

FIX_NAME = "mochi-attention-static-prompt-mask"
MODULE = "diffusers.models.attention_processor"


def _rotate(x, freqs_cos, freqs_sin):
    # Mochi's rotary embedding on interleaved (even, odd) feature pairs, as its processor applies it.
    x_even, x_odd = x[..., 0::2].float(), x[..., 1::2].float()
    cos = (x_even * freqs_cos - x_odd * freqs_sin).to(x.dtype)
    sin = (x_even * freqs_sin + x_odd * freqs_cos).to(x.dtype)
    return torch.stack([cos, sin], dim=-1).flatten(-2)


def _heads(attn, projection, norm, states):
    states = projection(states).unflatten(2, (attn.heads, -1))
    return norm(states) if norm is not None else states


def _compact_valid(states, valid):
    """``states`` (batch, tokens, features) with each valid token moved to its rank among the valid ones
    and zeros after them: upstream's selection followed by zero padding, as a batched 0/1 matmul."""
    rank = valid.long().cumsum(dim=1) - 1  # slot of each valid token
    slots = torch.arange(valid.shape[1], device=valid.device)
    permutation = (rank.unsqueeze(1) == slots.view(1, -1, 1)) & valid.unsqueeze(1)  # [b, slot, token]
    return torch.bmm(permutation.to(states.dtype), states)


def _static_mochi_attention(original, self, attn, hidden_states, encoder_hidden_states, attention_mask,
                            image_rotary_emb=None):
    if not is_neuron(hidden_states.device) or attention_mask is None:
        return original(self, attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
    query = _heads(attn, attn.to_q, attn.norm_q, hidden_states)
    key = _heads(attn, attn.to_k, attn.norm_k, hidden_states)
    value = _heads(attn, attn.to_v, None, hidden_states)
    encoder_query = _heads(attn, attn.add_q_proj, attn.norm_added_q, encoder_hidden_states)
    encoder_key = _heads(attn, attn.add_k_proj, attn.norm_added_k, encoder_hidden_states)
    encoder_value = _heads(attn, attn.add_v_proj, None, encoder_hidden_states)
    if image_rotary_emb is not None:
        query, key = _rotate(query, *image_rotary_emb), _rotate(key, *image_rotary_emb)

    sequence_length, encoder_sequence_length = hidden_states.shape[1], encoder_hidden_states.shape[1]
    joint = [torch.cat(pair, dim=1).transpose(1, 2) for pair in
             ((query, encoder_query), (key, encoder_key), (value, encoder_value))]
    valid = attention_mask.bool()  # (batch, prompt tokens)
    keys_valid = torch.cat([valid.new_ones(valid.shape[0], sequence_length), valid], dim=1)
    out = F.scaled_dot_product_attention(*joint, attn_mask=keys_valid[:, None, None, :], dropout_p=0.0,
                                         is_causal=False)
    out = out.transpose(1, 2).flatten(2, 3)
    hidden_states, encoder_out = out.split_with_sizes((sequence_length, encoder_sequence_length), dim=1)
    encoder_hidden_states = _compact_valid(encoder_out, valid)

    hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
    if hasattr(attn, "to_add_out"):
        encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
    return hidden_states, encoder_hidden_states


def _tiny_attention():
    from diffusers.models import attention_processor as module

    return module.MochiAttention(query_dim=8, added_kv_proj_dim=8, processor=module.MochiAttnProcessor2_0(),
                                 heads=2, dim_head=4).eval()


def _prompt_selection_breaks_the_graph() -> bool:
    from diffusers.models import attention_processor as module

    require_methods(module.MochiAttnProcessor2_0, ["__call__"])
    mask = torch.tensor([[1, 1, 0]])
    return not traces_whole(_tiny_attention(), torch.randn(1, 4, 8), torch.randn(1, 3, 8), mask)


@fix(FIX_NAME, "diffusers", _prompt_selection_breaks_the_graph, waits_for=MODULE)
def patch_mochi_attention() -> None:
    """Mochi's attention processor selects each sample's valid prompt tokens with ``torch.nonzero`` and
    attends over a sequence of data-dependent length, so its blocks do not compile with ``fullgraph=True``
    on Neuron.

    Detected by tracing a tiny ``MochiAttention`` with a prompt mask under ``fullgraph=True``: it does
    not capture. Patch: on a neuron device the processor attends over the whole sequence with a boolean
    key mask and moves the valid prompt tokens' outputs to upstream's slots with a permutation matmul.
    """
    from diffusers.models import attention_processor as module

    wrap(FIX_NAME, module.MochiAttnProcessor2_0, "__call__", _static_mochi_attention)
