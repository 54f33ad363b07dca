"""Generation of Llama 4, which Transformers never compiles, compiles on Neuron: one prefill-chunk graph and
one decode graph per batch size, with the CPU tokens."""

from __future__ import annotations

import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import upstream_behaviour
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.compiled_call import FIX_NAME

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}


def _prompts(lengths):
    generator = torch.Generator().manual_seed(0)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, width - length:] = torch.randint(3, 200, (length,), generator=generator)
        mask[row, width - length:] = 1
    return ids, mask


def _generate_on_neuron(model, ids, mask):
    with torch.no_grad(), count_graphs() as graphs:
        out = model.generate(input_ids=ids.to("neuron"), attention_mask=mask.to("neuron"), **GREEDY, **SIZES)
    return out.cpu(), graphs.count


def test_llama4_generation_compiles_two_graphs_with_the_cpu_tokens(fresh_dynamo):
    cpu = build_model("llama4").eval()
    device = build_model("llama4").eval().to("neuron")
    graphs = 0
    for lengths in ((7,), (20,), (41,)):  # one, two and three prefill chunks
        ids, mask = _prompts(lengths)
        with torch.no_grad():
            expected = cpu.generate(input_ids=ids, attention_mask=mask, **GREEDY)
        tokens, compiled = _generate_on_neuron(device, ids, mask)
        assert torch.equal(tokens, expected)
        graphs += compiled
    assert graphs == 2
    with upstream_behaviour(FIX_NAME):
        tokens, compiled = _generate_on_neuron(device, *_prompts((20,)))
    assert compiled == 0  # upstream runs the forward uncompiled
