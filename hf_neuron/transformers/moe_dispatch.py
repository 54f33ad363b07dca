"""Mixture-of-experts layers of DBRX and LongCat-Flash dispatch their experts with static shapes on Neuron.

Transformers gives expert modules one shared mechanism for the expert computation: a class decorated
with ``@use_experts_implementation`` (``transformers.integrations.moe``) runs the function that
``config._experts_implementation`` names in ``ALL_EXPERTS_FUNCTIONS`` ("grouped_mm" by default,
"batched_mm", ...). Those compute every (token, chosen expert) pair with tensors whose shapes follow
the token count alone, so Mixtral, Qwen3-MoE and the other decorated models compile one graph per
generation step.

DBRX's ``DbrxExperts`` and LongCat-Flash's ``LongcatFlashExperts`` do not use that mechanism (and
Transformers, which recognises it by the decorator in the modeling source, sets their
``_experts_implementation`` to "eager"): their forward loops over the experts that were hit
(``nonzero`` of the routing mask) and gathers each expert's tokens with ``torch.where``. Both are
data-dependent shapes, which a compiler with static shapes rejects: upstream marks the models
``_can_compile_fullgraph = False`` and generation on Neuron runs eagerly, every op dispatched on its own.
Transformers releases whose ``LongcatFlashExperts`` is decorated (the zero experts then handled by
``LongcatFlashMoE``, around a standard experts call) close LongCat-Flash's gap: its detector traces the
MoE layer of a tiny model, built as a user's is (with the experts implementation Transformers picks).

Here, for tensors on a neuron device, those two forwards hand the computation to upstream's own
``"batched_mm"`` experts function, through a small view (itself decorated with upstream's
``use_experts_implementation``) that shows the module's weights in the layout the function reads:
``gate_up_proj`` of shape ``(experts, 2 * intermediate, hidden)``, ``down_proj`` of shape
``(experts, hidden, intermediate)``.

- DBRX keeps gate (``w1``), up (``v1``) and down (``w2``) weights as flat ``(experts * ffn, hidden)``
  matrices. The view reshapes them per expert; gate and up are concatenated along the output
  dimension (a copy of the layer's gate/up weights each forward, as upstream's layout is one
  matrix), down is a transposed view.
- LongCat-Flash adds "zero-computation" experts: routing to one of them passes the token through
  unchanged, scaled by its routing weight. The view exposes the real experts only and marks the
  zero experts as upstream's expert-parallel sentinels (indices past the last local expert, which
  upstream's function skips and weighs zero); the pass-through part is added as ``identity(hidden) *
  (sum of the routing weights that chose a zero expert)``, through the module's identity expert as
  upstream's loop does (its tensor-parallel plan scales that module's output per rank).

On any other device the upstream forward runs unchanged.
"""

from __future__ import annotations

import torch

from hf_neuron.devices import is_neuron
from hf_neuron.patching import fix, require_methods, wrap
from hf_neuron.patching.tracing import traces_whole

DBRX_FIX = "dbrx-experts-static-dispatch"
LONGCAT_FIX = "longcat-flash-experts-static-dispatch"

DBRX_MODULE = "transformers.models.dbrx.modeling_dbrx"
LONGCAT_MODULE = "transformers.models.longcat_flash.modeling_longcat_flash"
#: What the LongCat-Flash patch reads of ``LongcatFlashExperts`` (the layer that loops over every expert,
#: zero-computation ones included).
_LONGCAT_LAYOUT = ("num_routed_experts", "identity_expert", "gate_up_proj", "down_proj", "act_fn")

#: Upstream's experts function used: a gather of each (token, expert) pair's weights and batched
#: matmuls, plain tensor ops whose shapes follow the token count. (Its "grouped_mm" form, under a
#: compile with other than bfloat16 weights, runs a host loop over per-expert offsets hidden in a
#: custom op instead.)
IMPLEMENTATION = "batched_mm"


def _static_device(device) -> bool:
    """A neuron tensor, or a meta one (``hf-neuron plan`` traces the steps of a Neuron generation on the
    meta device, where upstream's loop cannot run at all)."""
    return is_neuron(device) or device.type == "meta"


#: Built when a fix is applied (importing this module imports no Transformers submodule): the view
#: class and upstream's experts function, looked up once outside any traced forward.
_VIEW_CLASS: list = []
_FUNCTIONS: dict = {}


def _build_view_class():
    """An experts "module" in upstream's standard layout, dispatched by upstream's own decorator.

    ``use_experts_implementation`` gives it the flags and gate upstream's experts functions read
    (``has_gate``, ``is_transposed``, ``has_bias``, ``_apply_gate``, ...) for the standard layout.
    """
    if _VIEW_CLASS:
        return
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, use_experts_implementation

    _FUNCTIONS[IMPLEMENTATION] = ALL_EXPERTS_FUNCTIONS[IMPLEMENTATION]

    @use_experts_implementation
    class ExpertsView:
        def __init__(self, config, *, num_experts, gate_up_proj, down_proj, act_fn):
            self.num_experts = num_experts
            self.gate_up_proj = gate_up_proj  # (experts, 2 * intermediate, hidden): [gate; up]
            self.down_proj = down_proj  # (experts, hidden, intermediate)
            self.act_fn = act_fn

        def forward(self, hidden_states, top_k_index, top_k_weights):
            # The decorator's "eager" fallback: the view is only passed to upstream's function.
            raise NotImplementedError(f"the experts view runs upstream's {IMPLEMENTATION} only")

    _VIEW_CLASS.append(ExpertsView)


def _run_experts(hidden_states, top_k_index, top_k_weights, *, num_experts, gate_up_proj, down_proj, act_fn,
                 sentinels=False):
    """Upstream's static experts function over weights in its layout; ``hidden_states`` is (tokens, hidden)."""
    view = _VIEW_CLASS[0](None, num_experts=num_experts, gate_up_proj=gate_up_proj, down_proj=down_proj,
                          act_fn=act_fn)
    # Upstream's expert-parallel mode: routing indices >= num_experts are skipped and weigh nothing.
    view._is_expert_parallel = sentinels
    return _FUNCTIONS[IMPLEMENTATION](view, hidden_states, top_k_index, top_k_weights)


# --- DBRX ------------------------------------------------------------------------------------------


def _dbrx_static_forward(original, self, hidden_states, top_k_index, top_k_weights):
    if not _static_device(hidden_states.device):
        return original(self, hidden_states, top_k_index, top_k_weights)
    mlp = self.mlp
    per_expert = (-1, self.ffn_hidden_size, self.hidden_size)  # as upstream's loop splits them
    w1, v1, w2 = (weight.view(per_expert) for weight in (mlp.w1, mlp.v1, mlp.w2))
    # DBRX: gate = act(x @ w1[e].T), up = x @ v1[e].T, out = (gate * up) @ w2[e].
    out = _run_experts(hidden_states.reshape(-1, self.hidden_size), top_k_index, top_k_weights,
                       num_experts=w1.shape[0], gate_up_proj=torch.cat([w1, v1], dim=1), down_proj=w2.transpose(1, 2),
                       act_fn=mlp.activation_fn)
    return out.view(hidden_states.shape[0], -1, self.hidden_size)


# --- LongCat-Flash ---------------------------------------------------------------------------------


def _longcat_static_forward(original, self, hidden_states, top_k_index, top_k_weights):
    if not _static_device(hidden_states.device) or self.gate_up_proj is None or top_k_index.numel() == 0:
        return original(self, hidden_states, top_k_index, top_k_weights)
    routed = self.num_routed_experts
    # Indices >= ``routed`` (the zero experts) are sentinels to upstream's function: skipped, weighed 0.
    out = _run_experts(hidden_states, top_k_index, top_k_weights, num_experts=routed,
                       gate_up_proj=self.gate_up_proj[:routed], down_proj=self.down_proj, act_fn=self.act_fn,
                       sentinels=True)
    # The zero-computation experts: the token itself, times the routing weights that chose one. Through
    # the module's own identity expert, as upstream's loop: a tensor-parallel plan hooks it (each rank
    # adds its share of the pass-through before the ranks' outputs are summed).
    pass_through = (top_k_weights * (top_k_index >= routed)).sum(dim=-1, keepdim=True)
    return (out + self.identity_expert(hidden_states) * pass_through).to(hidden_states.dtype)


# --- Detection -------------------------------------------------------------------------------------


def _routing(tokens: int, experts: int, top_k: int):
    """A routing of ``tokens`` tokens to ``top_k`` experts each, with equal weights."""
    index = torch.stack([torch.arange(tokens) % experts, (torch.arange(tokens) + 1) % experts], dim=-1)[:, :top_k]
    return index, torch.full((tokens, top_k), 1.0 / top_k)


def _dbrx_experts_break_the_graph() -> bool:
    from transformers.models.dbrx import modeling_dbrx
    from transformers.models.dbrx.configuration_dbrx import DbrxFFNConfig

    require_methods(modeling_dbrx.DbrxExperts, ["forward"])
    config = DbrxFFNConfig(hidden_size=8, ffn_hidden_size=8, moe_num_experts=4, moe_top_k=2)
    experts = modeling_dbrx.DbrxExperts(config)
    for weight in (experts.mlp.w1, experts.mlp.v1, experts.mlp.w2):
        torch.nn.init.normal_(weight)  # created empty
    index, weights = _routing(3, 4, 2)
    return not traces_whole(experts, torch.randn(1, 3, 8), index, weights)


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


@fix(DBRX_FIX, "transformers", _dbrx_experts_break_the_graph, waits_for=DBRX_MODULE)
def patch_dbrx_experts() -> None:
    """DBRX's experts loop over the experts a batch hit (``nonzero``, ``torch.where``): data-dependent
    shapes, so its generation does not compile on Neuron.

    Detected by tracing a tiny ``DbrxExperts`` forward with ``fullgraph=True``: it does not capture.
    Patch: on a neuron device the forward runs upstream's ``batched_mm`` experts function
    (``transformers.integrations.moe``) over a view of DBRX's weights in that function's layout.
    """
    from transformers.models.dbrx import modeling_dbrx

    _build_view_class()
    wrap(DBRX_FIX, modeling_dbrx.DbrxExperts, "forward", _dbrx_static_forward)


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

    _build_view_class()
    wrap(LONGCAT_FIX, modeling_longcat_flash.LongcatFlashExperts, "forward", _longcat_static_forward)
