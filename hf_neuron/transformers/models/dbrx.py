"""DBRX: its experts dispatched with static shapes on Neuron, so its generation compiles.

``DbrxExperts`` loops over the experts a batch hit (``nonzero`` of the routing mask) and gathers each
expert's tokens with ``torch.where``: data-dependent shapes, which a static-shape compiler rejects.
DBRX keeps gate (``w1``), up (``v1``) and down (``w2``) weights as flat ``(experts * ffn, hidden)``
matrices; on a neuron device the forward runs upstream's ``batched_mm`` experts function over a view
of them per expert (gate and up concatenated, down transposed). See :mod:`._static_experts`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.tracing import traces_whole
from hf_neuron.transformers.models._static_experts import build_view_class, routing, run_experts, static_device

DBRX_FIX = "dbrx-experts-static-dispatch"
DBRX_MODULE = "transformers.models.dbrx.modeling_dbrx"


def _dbrx_static_forward(original, self, hidden_states, top_k_index, top_k_weights):
    if not static_device(hidden_states.device):
        return original(self, hidden_states, top_k_index, top_k_weights)
    mlp = self.mlp
    per_expert = (-1, self.ffn_hidden_size, self.hidden_size)  # as upstream's loop splits them
    w1, v1, w2 = (weight.view(per_expert) for weight in (mlp.w1, mlp.v1, mlp.w2))
    # DBRX: gate = act(x @ w1[e].T), up = x @ v1[e].T, out = (gate * up) @ w2[e].
    out = run_experts(hidden_states.reshape(-1, self.hidden_size), top_k_index, top_k_weights,
                       num_experts=w1.shape[0], gate_up_proj=torch.cat([w1, v1], dim=1), down_proj=w2.transpose(1, 2),
                       act_fn=mlp.activation_fn)
    return out.view(hidden_states.shape[0], -1, self.hidden_size)


def _dbrx_experts_break_the_graph() -> bool:
    from transformers.models.dbrx import modeling_dbrx
    from transformers.models.dbrx.configuration_dbrx import DbrxFFNConfig

    require_methods(modeling_dbrx.DbrxExperts, ["forward"])
    config = DbrxFFNConfig(hidden_size=8, ffn_hidden_size=8, moe_num_experts=4, moe_top_k=2)
    experts = modeling_dbrx.DbrxExperts(config)
    for weight in (experts.mlp.w1, experts.mlp.v1, experts.mlp.w2):
        torch.nn.init.normal_(weight)  # created empty
    index, weights = routing(3, 4, 2)
    return not traces_whole(experts, torch.randn(1, 3, 8), index, weights)


@fix(DBRX_FIX, "transformers", _dbrx_experts_break_the_graph, waits_for=DBRX_MODULE)
def patch_dbrx_experts() -> None:
    """DBRX's experts loop over the experts a batch hit (``nonzero``, ``torch.where``): data-dependent
    shapes, so its generation does not compile on Neuron.

    Detected by tracing a tiny ``DbrxExperts`` forward with ``fullgraph=True``: it does not capture.
    Patch: on a neuron device the forward runs upstream's ``batched_mm`` experts function
    (``transformers.integrations.moe``) over a view of DBRX's weights in that function's layout.
    """
    from transformers.models.dbrx import modeling_dbrx

    build_view_class()
    wrap(DBRX_FIX, modeling_dbrx.DbrxExperts, "forward", _dbrx_static_forward)


__all__ = ["DBRX_FIX"]
