"""DeepSeek V4's lightning indexer records nothing for autograd, as its integer result has no gradient."""

from __future__ import annotations

from hf_neuron.patching import upstream_behaviour
from hf_neuron.testing.generation_workload import workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.models.deepseek_v4 import DEEPSEEK_V4_FIX


def test_deepseek_v4s_indexer_records_nothing_for_autograd():
    """Its result is integer indices: recorded ops would only give a compiled training step zero gradients
    for the indexer's parameters where eager gives none (the compatibility table's L4 compares the two)."""
    model = build_model("deepseek_v4").train()
    indexers = [m for m in model.modules() if type(m).__name__ == "DeepseekV4Indexer"]
    recorded = []
    for indexer in indexers:
        indexer.kv_proj.register_forward_hook(lambda module, inputs, output: recorded.append(output.requires_grad))
    ids = workload_prompts(model.config.vocab_size, (12,))[0][None]
    model(input_ids=ids, labels=ids).loss.backward()
    assert indexers and recorded and not any(recorded)
    recorded.clear()
    with upstream_behaviour(DEEPSEEK_V4_FIX):
        model(input_ids=ids, labels=ids)
    assert recorded and all(recorded)
