"""HiDream-I1's mixture-of-experts feed-forward runs its experts with static shapes on Neuron.

At inference ``MOEFeedForwardSwiGLU.moe_infer`` sorts the (token, expert) pairs by expert, copies the
per-expert token counts to the host (``bincount().cpu().numpy()``) and loops over them, running each
expert on the slice of tokens routed to it. The counts are data: Dynamo breaks the graph there, and a
static-shape compiler could not compile the slices anyway, so ``compile_repeated_blocks(fullgraph=True)``
fails on HiDream's blocks.

Here, for tensors on a neuron device, every expert runs on every token and its output is weighted by
the routing weight the token gave it (zero when the token did not choose it); the weighted outputs are
summed in expert order, as upstream's ``scatter_reduce`` adds them. HiDream routes each token to 2 of 4
experts, so this computes twice the expert FLOPs of the routed form, in shapes that follow the token
count alone: one graph per block. The experts are still called as modules, so a tensor-parallel plan's
hooks on them (colwise ``w1``/``w3``, rowwise ``w2``) apply unchanged.

On any other device the upstream loop runs unchanged.
"""

from __future__ import annotations

import torch

from hf_neuron.devices import is_neuron
from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.tracing import traces_whole

FIX_NAME = "hidream-moe-static-dispatch"
MODULE = "diffusers.models.transformers.transformer_hidream_image"


def _dense_moe_infer(original, self, x, flat_expert_indices, flat_expert_weights):
    if not is_neuron(x.device):
        return original(self, x, flat_expert_indices, flat_expert_weights)
    with torch.no_grad():  # as upstream's moe_infer
        top_k = self.num_activated_experts
        indices = flat_expert_indices.view(-1, top_k)  # (tokens, top_k), as the gate returned them
        weights = flat_expert_weights.view(-1, top_k)
        out = torch.zeros_like(x)
        for expert_index, expert in enumerate(self.experts):
            chosen = (indices == expert_index).to(weights.dtype)
            weight = (weights * chosen).sum(dim=-1, keepdim=True)  # 0 for the tokens that did not choose it
            expert_out = expert(x)
            out = out.to(expert_out.dtype) + expert_out * weight
        return out


def _moe_infer_breaks_the_graph() -> bool:
    from diffusers.models.transformers import transformer_hidream_image as module

    require_methods(module.MOEFeedForwardSwiGLU, ["moe_infer", "forward"])
    layer = module.MOEFeedForwardSwiGLU(dim=8, hidden_dim=16, num_routed_experts=4, num_activated_experts=2).eval()
    return not traces_whole(layer, torch.randn(1, 3, 8))


@fix(FIX_NAME, "diffusers", _moe_infer_breaks_the_graph, waits_for=MODULE)
def patch_hidream_moe_infer() -> None:
    """HiDream's MoE feed-forward loops over per-expert token counts copied to the host
    (``bincount().cpu().numpy()``), so its blocks do not compile with ``fullgraph=True`` on Neuron.

    Detected by tracing a tiny ``MOEFeedForwardSwiGLU`` in eval mode with ``fullgraph=True``: it does not
    capture. Patch: on a neuron device ``moe_infer`` runs every expert on every token, weighted by the
    token's routing weight for it (zero when not chosen), summed in expert order.
    """
    from diffusers.models.transformers import transformer_hidream_image as module

    wrap(FIX_NAME, module.MOEFeedForwardSwiGLU, "moe_infer", _dense_moe_infer)
