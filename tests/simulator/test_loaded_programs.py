"""A graph the simulated compiler lowered before in this process reuses its program: AOTAutograd does not
trace it again, the results and the graph log are those of a fresh compile, and anything that changes
what the program does (shapes, aliasing, constants, grad mode, device, a training graph) lowers anew."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends import common

from hf_neuron.simulator import compiler, graph_log, loaded_programs


@pytest.fixture
def lowerings(monkeypatch):
    """How many times AOTAutograd traced a graph for the backend."""
    monkeypatch.delenv(loaded_programs.RELOWER_ENV, raising=False)
    monkeypatch.delenv(compiler.FALLBACK_ENV, raising=False)
    calls = []
    original = common.aot_autograd

    def counted(**kwargs):
        traced = original(**kwargs)

        def run(gm, example_inputs):
            calls.append(gm)
            return traced(gm, example_inputs)

        return run

    monkeypatch.setattr(common, "aot_autograd", counted)
    loaded_programs.clear()
    torch._dynamo.reset()
    graph_log.reset()
    yield calls
    torch._dynamo.reset()
    graph_log.reset()
    loaded_programs.clear()


def _block(scale: float = 2.0):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8).to("neuron")

    def forward(x, cache):
        cache.add_(1)  # an input mutation, as a KV cache update is
        scales = torch.tensor([scale] * 8)  # a constant the graph holds (a tensor built from Python values)
        return torch.nn.functional.gelu(linear(x)) * scales.to(x.device) + cache

    return linear, forward


def _compile_and_run(forward, *inputs, reset: bool = True):
    if reset:
        torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(forward, backend="neuron", dynamic=False)(*inputs)


def test_the_same_inference_graph_after_a_reset_is_not_lowered_again(lowerings):
    _, forward = _block()
    x = torch.randn(2, 8, device="neuron")
    first_cache, second_cache = torch.zeros(2, 8, device="neuron"), torch.zeros(2, 8, device="neuron")
    first = _compile_and_run(forward, x, first_cache)
    second = _compile_and_run(forward, x, second_cache)
    assert len(lowerings) == 1
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    assert second_cache.eq(1).all()  # the reused program still writes its mutated input back
    fresh, reused = graph_log.records()
    assert fresh["status"] == reused["status"] == "compiled"
    assert (fresh["cache"], reused["cache"]) == ("miss", "hit")
    for field in ("ops", "forward_nodes", "backward", "inputs", "node_count"):
        assert reused[field] == fresh[field], field


def test_what_changes_the_program_lowers_it_again(lowerings):
    _, forward = _block()
    x = torch.randn(2, 8, device="neuron")
    full_precision = _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    _compile_and_run(forward, torch.randn(3, 8, device="neuron"), torch.zeros(3, 8, device="neuron"))  # shapes
    _compile_and_run(forward, x, torch.zeros(2, 16, device="neuron")[:, :8])  # a view with other strides
    _, other_constant = _block(scale=3.0)
    _compile_and_run(other_constant, x, torch.zeros(2, 8, device="neuron"))
    with torch.autocast("neuron", dtype=torch.bfloat16):  # autocast is traced into the program
        autocast = _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    assert not torch.equal(autocast, full_precision)  # the linear ran in bfloat16
    assert len(lowerings) == 5


def test_a_reused_program_computes_what_eager_computes(lowerings):
    linear, forward = _block()
    x = torch.randn(2, 8, device="neuron")
    _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    with torch.no_grad():
        linear.weight.mul_(-1)  # new parameter values: inputs of the program, not part of it
        expected = forward(x, torch.zeros(2, 8, device="neuron"))
    reused = _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    assert len(lowerings) == 1
    torch.testing.assert_close(reused, expected, rtol=0, atol=0)


def test_training_graphs_are_lowered_every_time(lowerings):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to("neuron")
    x = torch.randn(2, 8, device="neuron")
    for _ in range(2):
        torch._dynamo.reset()
        torch.compile(model, backend="neuron", dynamic=False)(x).sum().backward()
    assert len(lowerings) == 2
    assert len(graph_log.records("backward")) == 2


def test_relower_setting_turns_the_reuse_off(lowerings, monkeypatch):
    monkeypatch.setenv(loaded_programs.RELOWER_ENV, "1")
    _, forward = _block()
    x = torch.randn(2, 8, device="neuron")
    _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    _compile_and_run(forward, x, torch.zeros(2, 8, device="neuron"))
    assert len(lowerings) == 2


def test_the_kept_programs_are_bounded(lowerings, monkeypatch):
    monkeypatch.setattr(loaded_programs, "CAPACITY", 1)
    _, forward = _block()
    small, large = torch.randn(2, 8, device="neuron"), torch.randn(3, 8, device="neuron")
    for x in (small, large, small):
        _compile_and_run(forward, x, torch.zeros(x.shape, device="neuron"))
    assert len(lowerings) == 3  # the first program was dropped to keep the second
