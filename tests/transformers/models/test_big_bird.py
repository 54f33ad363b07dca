"""A block-sparse BigBird decoder switches to full attention when generate starts, as its first cached
forward would: its generation steps then trace into one graph each, so generate compiles them (two
graphs) and gives the CPU tokens."""

from __future__ import annotations

import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import APPLIED, get_fix, upstream_behaviour
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import capture
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.models.big_bird import FIX_NAME, FULL, SPARSE

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0}


def _generate(model, length, **kwargs):
    ids = torch.randint(3, 200, (1, length), generator=torch.Generator().manual_seed(length)).to(model.device)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **GREEDY, **kwargs).cpu()


def test_a_block_sparse_decoder_generates_compiled_with_the_cpu_tokens(fresh_dynamo, monkeypatch):
    cpu = build_model("big_bird").eval()
    assert get_fix(FIX_NAME).status == APPLIED, get_fix(FIX_NAME).reason
    device = build_model("big_bird").eval().to("neuron")
    assert device.config.is_decoder and device.bert.attention_type == SPARSE  # as the checkpoints' default

    # Upstream's model switches itself inside the first (compiled) step: no step traces whole.
    monkeypatch.setattr(capture, "_verdicts", {})
    with upstream_behaviour(FIX_NAME), count_graphs() as counted:
        compiles, reason = generation_compiles(device)
        eager = _generate(device, 7, **SIZES)
    assert not compiles and "does not trace into one graph" in reason and counted.count == 0
    assert torch.equal(eager, _generate(cpu, 7))

    device = build_model("big_bird").eval().to("neuron")
    monkeypatch.setattr(capture, "_verdicts", {})
    graphs = 0
    for length in (7, 20):  # one prefill chunk, two
        with count_graphs() as counted:
            tokens = _generate(device, length, **SIZES)
        graphs += counted.count
        assert torch.equal(tokens, _generate(cpu, length)), f"prompt of {length} tokens"
    assert device.bert.attention_type == FULL
    assert graphs == 2
