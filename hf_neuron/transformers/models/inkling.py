"""Tensor-parallel plans of Inkling's mixture-of-experts layers that shard what their forward cannot use.

Inkling is the one top-100 architecture whose expert layers' plan leaves two gaps, both in code its
plan selects rather than in the model's forward:

- ``tp-all-reduce-local-params``: the shared experts keep their weights as bare 3-D parameters, which
  their plan entries shard, and the owner module gets the ``"all_reduce"`` style: all-reduce the
  partial output. That style never hands the forward its local shards (as ``"local_params"`` does),
  so the forward multiplies plain activations with DTensor weights (``aten.bmm.default got mixed
  torch.Tensor and DTensor``): every tensor-parallel forward fails.
- ``inkling-tp-plan-packed-experts``: the routed experts fuse the gate and up projections in one
  parameter, ``gate_up_proj`` (gate rows, then up rows), that the forward splits in two halves. The
  plan splits it ``"colwise"``, contiguously, so one rank holds every gate row and the other every up
  row, and each rank's halves pair gate rows with gate rows: TP=2 logits differ from one device.
"""

from __future__ import annotations

from hf_neuron.patching import fix, original, replace

LOCAL_FIX = "tp-all-reduce-local-params"
PACKED_FIX = "inkling-tp-plan-packed-experts"

TP_MODULE = "transformers.distributed.tensor_parallel"
INKLING_CONFIG_MODULE = "transformers.models.inkling.configuration_inkling"

#: The routed experts' fused gate/up parameter in Inkling's text plan.
FUSED_EXPERTS = "layers.*.mlp.experts.gate_up_proj"


def _local_tensors(self, module) -> bool:
    return True


def _all_reduce_runs_on_dtensors() -> bool:
    import torch
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, AllReduceParallel

    style = ALL_PARALLEL_STYLES.get("all_reduce") if hasattr(ALL_PARALLEL_STYLES, "get") else None
    if not isinstance(style, AllReduceParallel):
        raise RuntimeError("the 'all_reduce' tensor-parallel style is no longer AllReduceParallel")
    return not original(AllReduceParallel, "should_use_local_tensors")(style, torch.nn.Linear(2, 2))


@fix(LOCAL_FIX, "transformers", _all_reduce_runs_on_dtensors, waits_for=TP_MODULE)
def patch_all_reduce_local_params() -> None:
    """The ``"all_reduce"`` style runs its module on DTensor weights: Inkling's shared experts fail under TP.

    Gap: a module with the ``"all_reduce"`` style all-reduces its partial output, but its forward
    gets its parameters as DTensors (the style does not ask for local tensors), and Inkling's shared
    experts, whose bare parameters their plan shards, multiply plain activations with them
    (``mixed torch.Tensor and DTensor``). Detected by asking the registered style whether its module
    runs on local tensors. Patch: it does, as ``"local_params"``: the forward computes on this rank's
    shards and the style all-reduces the partial result.
    """
    from transformers.distributed.tensor_parallel import AllReduceParallel

    replace(LOCAL_FIX, AllReduceParallel, "should_use_local_tensors", _local_tensors)


def _packed_plan(plan: dict) -> dict:
    return {**plan, FUSED_EXPERTS: "packed_colwise"}


def _fused_experts_split_contiguously() -> bool:
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    plan = original(InklingTextConfig, "base_model_tp_plan")
    if not isinstance(plan, dict):
        raise RuntimeError("Inkling's text configuration has no tensor-parallel plan: the check no longer applies")
    # Transformers 5.25 and later leave the routed experts out of the TP plan (their expert-parallel
    # plan shards them by expert): then nothing splits the fused parameter.
    return plan.get(FUSED_EXPERTS) == "colwise"


@fix(PACKED_FIX, "transformers", _fused_experts_split_contiguously, waits_for=INKLING_CONFIG_MODULE)
def patch_inkling_packed_experts() -> None:
    """Inkling's plan splits the experts' fused gate/up parameter contiguously: TP logits are wrong.

    Gap: ``gate_up_proj`` holds every expert's gate rows followed by its up rows, and the forward
    splits it in two halves; the plan's ``"colwise"`` gives one rank the gate rows and the other the
    up rows, so each rank multiplies gate rows with gate rows (TP=2 logits off by 4e-4 on a tiny
    model). Detected by reading the entry in upstream's plan for Inkling's text configuration (no
    entry: the plan does not split the parameter, nothing to fix).
    Patch: that entry is ``"packed_colwise"``, as in the other fused-expert plans (Mixtral, Qwen3 MoE,
    MiMo-V2-Flash): each rank gets its share of the gate rows and of the up rows. A plan the user
    passes in ``DistributedConfig(tp_plan=...)`` is kept.
    """
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    replace(PACKED_FIX, InklingTextConfig, "base_model_tp_plan",
            _packed_plan(original(InklingTextConfig, "base_model_tp_plan")))
