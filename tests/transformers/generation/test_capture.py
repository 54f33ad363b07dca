"""Models Transformers marks ``_can_compile_fullgraph=False`` compile on Neuron when their forward traces
into one graph per step (and generate the CPU tokens in 2 graphs), and stay eager, with the reason, when it
does not."""

from __future__ import annotations

import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation.capture import forward_traces_whole
from hf_neuron.transformers.generation.defaults import generation_compiles

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}


def _prompt(length):
    return torch.randint(3, 200, (1, length), generator=torch.Generator().manual_seed(length))


def _cpu_and_neuron_tokens(arch, lengths):
    cpu = build_model(arch).eval()
    device = build_model(arch).eval().to("neuron")
    graphs = 0
    for length in lengths:
        ids = _prompt(length)
        with torch.no_grad():
            expected = cpu.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **GREEDY)
            with count_graphs() as counted:
                out = device.generate(input_ids=ids.to("neuron"), attention_mask=torch.ones_like(ids).to("neuron"),
                                      **GREEDY, **SIZES)
        assert torch.equal(out.cpu(), expected), f"{arch}, prompt of {length} tokens"
        graphs += counted.count
    return device, graphs


def test_a_forward_that_traces_whole_compiles_despite_the_flag(fresh_dynamo):
    device, graphs = _cpu_and_neuron_tokens("gpt_neo", (7, 20, 41))  # one, two and three prefill chunks
    assert type(device)._can_compile_fullgraph is False
    assert generation_compiles(device) == (True, None)
    assert graphs == 2  # one prefill-chunk graph, one decode graph


def test_a_forward_that_takes_positions_from_generate_compiles(fresh_dynamo, monkeypatch):
    """BERT's LM head computes its absolute positions from the cache's length, an int read off a tensor,
    unless it gets ``position_ids``, which ``generate`` passes: traced with the inputs ``generate`` gives,
    the steps are whole graphs, and generation compiles into two."""
    from hf_neuron.transformers.generation import capture, steps

    monkeypatch.setattr(capture, "_verdicts", {})
    device, graphs = _cpu_and_neuron_tokens("bert", (7, 20, 41))
    assert device.config.is_decoder and type(device)._can_compile_fullgraph is False
    assert generation_compiles(device) == (True, None)
    assert graphs == 2
    # Traced without the positions generate passes, the cache length is read as an int.
    monkeypatch.setattr(capture, "_verdicts", {})
    monkeypatch.setattr(steps, "generation_position_ids", lambda model, mask: {})
    compiles, reason = forward_traces_whole(device)
    assert not compiles and "prefill chunk does not trace into one graph" in reason


def test_a_forward_that_breaks_stays_eager_with_the_reason(fresh_dynamo, monkeypatch):
    # DBRX's upstream expert loop (data-dependent shapes): with its static-dispatch fix off.
    from hf_neuron.patching import upstream_behaviour
    from hf_neuron.transformers.generation import capture
    from hf_neuron.transformers.models.dbrx import DBRX_FIX

    monkeypatch.setattr(capture, "_verdicts", {})
    with upstream_behaviour(DBRX_FIX):
        device, graphs = _cpu_and_neuron_tokens("dbrx", (20,))
        compiles, reason = generation_compiles(device)
    assert not compiles
    assert "DbrxForCausalLM sets _can_compile_fullgraph=False" in reason
    assert "prefill chunk does not trace into one graph" in reason
    assert graphs == 0


def test_the_answer_is_traced_once_per_class_and_configuration(monkeypatch):
    from hf_neuron.transformers.generation import capture

    traced = []
    monkeypatch.setattr(capture, "_verdicts", {})
    monkeypatch.setattr(capture, "_trace_steps", lambda model: traced.append(model) or (True, None))
    first, second = build_model("gpt_neo"), build_model("gpt_neo", seed=1)
    assert forward_traces_whole(first) == forward_traces_whole(second) == (True, None)
    assert forward_traces_whole(build_model("gpt_neo", window_size=8)) == (True, None)
    assert len(traced) == 2
