"""LongCat-Flash: its experts dispatched with static shapes on Neuron, so its generation compiles.

``LongcatFlashExperts`` loops over the experts a batch hit (``nonzero``, ``torch.where``, ``.item()``),
zero-computation experts included: routing to one of those passes the token through, scaled by its
routing weight. On a neuron device the real experts run upstream's ``batched_mm`` experts function
(the zero experts as its expert-parallel sentinels, skipped and weighed zero) and the pass-through is
added through the module's identity expert. Transformers releases whose ``LongcatFlashExperts`` uses
upstream's experts mechanism close the gap (the detector traces a tiny model's MoE layer). See
:mod:`._static_experts`.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.tracing import traces_whole
from hf_neuron.transformers.models._static_experts import build_view_class, run_experts, static_device

LONGCAT_FIX = "longcat-flash-experts-static-dispatch"
LONGCAT_MODULE = "transformers.models.longcat_flash.modeling_longcat_flash"
#: What the LongCat-Flash patch reads of ``LongcatFlashExperts`` (the layer that loops over every expert,
#: zero-computation ones included).
_LONGCAT_LAYOUT = ("num_routed_experts", "identity_expert", "gate_up_proj", "down_proj", "act_fn")


def _longcat_static_forward(original, self, hidden_states, top_k_index, top_k_weights):
    if not static_device(hidden_states.device) or self.gate_up_proj is None or top_k_index.numel() == 0:
        return original(self, hidden_states, top_k_index, top_k_weights)
    routed = self.num_routed_experts
    # Indices >= ``routed`` (the zero experts) are sentinels to upstream's function: skipped, weighed 0.
    out = run_experts(hidden_states, top_k_index, top_k_weights, num_experts=routed,
                       gate_up_proj=self.gate_up_proj[:routed], down_proj=self.down_proj, act_fn=self.act_fn,
                       sentinels=True)
    # The zero-computation experts: the token itself, times the routing weights that chose one. Through
    # the module's own identity expert, as upstream's loop: a tensor-parallel plan hooks it (each rank
    # adds its share of the pass-through before the ranks' outputs are summed).
    pass_through = (top_k_weights * (top_k_index >= routed)).sum(dim=-1, keepdim=True)
    return (out + self.identity_expert(hidden_states) * pass_through).to(hidden_states.dtype)


def _longcat_moe_breaks_the_graph() -> bool:
    from transformers.models.longcat_flash import modeling_longcat_flash
    from transformers.models.longcat_flash.configuration_longcat_flash import LongcatFlashConfig

    require_methods(modeling_longcat_flash.LongcatFlashMoE, ["forward"])
    config = LongcatFlashConfig(vocab_size=16, hidden_size=8, num_layers=1, num_attention_heads=2, q_lora_rank=4,
                                kv_lora_rank=4, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4,
                                ffn_hidden_size=8, expert_ffn_hidden_size=8, n_routed_experts=4, zero_expert_num=2,
                                num_experts_per_tok=2)
    # A model, not a lone layer: the model sets the experts implementation a decorated layer dispatches on.
    moe = modeling_longcat_flash.LongcatFlashModel(config).layers[0].mlp
    if traces_whole(moe, torch.randn(1, 3, 8)):
        return False
    missing = [name for name in _LONGCAT_LAYOUT if not hasattr(moe.experts, name)]
    if missing:
        raise RuntimeError(f"LongcatFlashExperts does not trace whole and has no {', '.join(missing)} to patch")
    return True


@fix(LONGCAT_FIX, "transformers", _longcat_moe_breaks_the_graph, waits_for=LONGCAT_MODULE)
def patch_longcat_flash_experts() -> None:
    """LongCat-Flash's experts loop over the experts a batch hit (``nonzero``, ``torch.where``,
    ``.item()``): data-dependent shapes, so its generation does not compile on Neuron.

    Detected by tracing the MoE layer of a tiny ``LongcatFlashModel`` with ``fullgraph=True``: it does
    not capture (it does where the experts dispatch through upstream's experts functions, which closes
    the gap). Patch: on a neuron device the real experts run upstream's ``batched_mm`` experts function
    (zero-computation experts as its expert-parallel sentinels) and the zero experts' pass-through
    is added as the token times their routing weights.
    """
    from transformers.models.longcat_flash import modeling_longcat_flash

    build_view_class()
    wrap(LONGCAT_FIX, modeling_longcat_flash.LongcatFlashExperts, "forward", _longcat_static_forward)


__all__ = ["LONGCAT_FIX"]
