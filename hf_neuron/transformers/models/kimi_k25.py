"""Kimi-K2.5 run on text compiles: its placeholder ids are zeroed with static shapes (:mod:`._placeholder_ids`)."""

from hf_neuron.transformers.models._placeholder_ids import register_placeholder_fix

FIX_NAME = register_placeholder_fix(
    "kimi-k25-placeholder-ids-static-shape", "transformers.models.kimi_k25.modeling_kimi_k25", "Kimi_K25Model")
