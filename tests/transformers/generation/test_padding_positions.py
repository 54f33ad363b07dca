"""Prompts of a model that counts its positions from the cache's length (the BART family's decoders:
Pegasus, Marian, Blenderbot, Whisper's...) are not padded to a prefill bucket: its compiled generation
gives the CPU tokens, in one prefill-chunk graph and one decode graph."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import upstream_behaviour
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.chunked_prefill import PAD_FIX
from hf_neuron.transformers.generation.steps import generate_passes_positions

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
#: One chunk, two and three (left padding would add 9, 12 and 7 positions).
LENGTHS = (7, 20, 41)


def _prompt(length):
    return torch.randint(3, 200, (1, length), generator=torch.Generator().manual_seed(length))


def _generate(model, ids, padding=0):
    ids = torch.nn.functional.pad(ids, (padding, 0), value=GREEDY["pad_token_id"]).to(model.device)
    mask = (torch.arange(ids.shape[1], device=model.device) >= padding).long().expand_as(ids)
    kwargs = SIZES if model.device.type == "neuron" else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, **GREEDY, **kwargs)
    return out[:, -GREEDY["max_new_tokens"]:].cpu()


def _tokens_and_graphs(model):
    tokens, graphs = [], 0
    for length in LENGTHS:
        with count_graphs() as counted:
            tokens.append(_generate(model, _prompt(length)))
        graphs += counted.count
    return tokens, graphs


@pytest.mark.parametrize("arch", ["pegasus"])
def test_generation_gives_the_cpu_tokens_in_two_graphs(fresh_dynamo, arch):
    cpu = build_model(arch).eval()
    assert not generate_passes_positions(cpu)
    expected = [_generate(cpu, _prompt(length)) for length in LENGTHS]
    # Upstream's decoder counts left padding as positions: a padded prompt gives other tokens.
    assert not torch.equal(_generate(cpu, _prompt(7), padding=9), expected[0])

    device = build_model(arch).eval().to("neuron")
    tokens, graphs = _tokens_and_graphs(device)
    assert all(torch.equal(got, want) for got, want in zip(tokens, expected)), (tokens, expected)
    assert graphs == 2  # one prefill chunk (and its overlapping re-run), one decode step (and a short prompt's)

    # Upstream's prefill (no schedule) gives the same tokens, with a graph per chunk remainder.
    torch._dynamo.reset()
    with upstream_behaviour(PAD_FIX):
        tokens, graphs = _tokens_and_graphs(device)
    assert all(torch.equal(got, want) for got, want in zip(tokens, expected))
    assert graphs > 2
