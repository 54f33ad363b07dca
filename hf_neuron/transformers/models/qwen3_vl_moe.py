"""Qwen3-VL-MoE generates from images compiled: its deepstack merge with static shapes (:mod:`._deepstack`)."""

from hf_neuron.transformers.models._deepstack import register_deepstack_fix

FIX_NAME = register_deepstack_fix(
    "qwen3-vl-moe-deepstack-static-merge", "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
    "Qwen3VLMoeTextModel", "Qwen3VLMoeModel")
