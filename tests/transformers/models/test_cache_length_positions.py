"""TrOCR, MVP and RoFormer decoders count positions from the static cache's length: their generation
steps trace into one graph each, so generate compiles them (two graphs) and gives the CPU tokens."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import APPLIED, get_fix, upstream_behaviour
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import capture
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.models import mvp, roformer, trocr

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
FIXES = {"trocr": trocr.FIX_NAME, "mvp": mvp.FIX_NAME, "roformer": roformer.FIX_NAME}


def _prompt(length):
    return torch.randint(3, 200, (1, length), generator=torch.Generator().manual_seed(length))


def _generate(model, ids, **kwargs):
    ids = ids.to(model.device)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **GREEDY, **kwargs).cpu()


@pytest.mark.parametrize("arch", sorted(FIXES))
def test_generation_compiles_two_graphs_with_the_cpu_tokens(fresh_dynamo, monkeypatch, arch):
    fix = get_fix(FIXES[arch])
    cpu = build_model(arch).eval()
    assert fix.status == APPLIED, fix.reason
    device = build_model(arch).eval().to("neuron")
    assert type(device)._can_compile_fullgraph is False
    monkeypatch.setattr(capture, "_verdicts", {})
    assert generation_compiles(device) == (True, None)
    graphs = 0
    for length in (7, 20):  # one prefill chunk, two
        with count_graphs() as counted:
            tokens = _generate(device, _prompt(length), **SIZES)
        graphs += counted.count
        assert torch.equal(tokens, _generate(cpu, _prompt(length))), f"{arch}, prompt of {length} tokens"
    assert graphs == 2

    # Upstream's position embedding makes an arange between two tensor values: no step traces whole.
    monkeypatch.setattr(capture, "_verdicts", {})
    with upstream_behaviour(FIXES[arch]):
        compiles, reason = generation_compiles(device)
    assert not compiles and "does not trace into one graph" in reason and "PendingUnbackedSymbol" in reason
