"""Static-shape expert dispatch shared by the DBRX and LongCat-Flash fixes (:mod:`.dbrx`, :mod:`.longcat_flash`).

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

#: Upstream's experts function used: a gather of each (token, expert) pair's weights and batched
#: matmuls, plain tensor ops whose shapes follow the token count. (Its "grouped_mm" form, under a
#: compile with other than bfloat16 weights, runs a host loop over per-expert offsets hidden in a
#: custom op instead.)
IMPLEMENTATION = "batched_mm"


def static_device(device) -> bool:
    """A neuron tensor, or a meta one (``hf-neuron plan`` traces the steps of a Neuron generation on the
    meta device, where upstream's loop cannot run at all)."""
    return is_neuron(device) or device.type == "meta"


#: Built when a fix is applied (importing this module imports no Transformers submodule): the view
#: class and upstream's experts function, looked up once outside any traced forward.
_VIEW_CLASS: list = []
_FUNCTIONS: dict = {}


def build_view_class():
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


def run_experts(hidden_states, top_k_index, top_k_weights, *, num_experts, gate_up_proj, down_proj, act_fn,
                 sentinels=False):
    """Upstream's static experts function over weights in its layout; ``hidden_states`` is (tokens, hidden)."""
    view = _VIEW_CLASS[0](None, num_experts=num_experts, gate_up_proj=gate_up_proj, down_proj=down_proj,
                          act_fn=act_fn)
    # Upstream's expert-parallel mode: routing indices >= num_experts are skipped and weigh nothing.
    view._is_expert_parallel = sentinels
    return _FUNCTIONS[IMPLEMENTATION](view, hidden_states, top_k_index, top_k_weights)


def routing(tokens: int, experts: int, top_k: int):
    """A routing of ``tokens`` tokens to ``top_k`` experts each, with equal weights."""
    index = torch.stack([torch.arange(tokens) % experts, (torch.arange(tokens) + 1) % experts], dim=-1)[:, :top_k]
    return index, torch.full((tokens, top_k), 1.0 / top_k)


__all__ = ["IMPLEMENTATION", "build_view_class", "routing", "run_experts", "static_device"]
