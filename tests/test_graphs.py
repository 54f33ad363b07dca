"""One graph counter: the simulator's graph log when the simulator is active, Dynamo's count elsewhere."""

from __future__ import annotations

import pytest
import torch

import hf_neuron.simulator
from hf_neuron.graphs import count_graphs


def _twice_two_shapes(backend: str, device: str = "cpu") -> None:
    compiled = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend=backend, dynamic=False)
    for n in (3, 5, 3):
        compiled(torch.ones(n, device=device))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_without_the_simulator_dynamo_counts(monkeypatch):
    # As on real Trainium: no graph log, so Dynamo's unique graphs of any backend are counted.
    monkeypatch.setattr(hf_neuron.simulator, "is_simulated", lambda: False)
    with count_graphs() as graphs:
        _twice_two_shapes("eager")
    assert graphs.source == "dynamo"
    assert graphs.count == 2
    assert graphs.records == []


@pytest.mark.skipif(not hf_neuron.simulator.is_simulated(), reason="reads the simulator's graph log")
def test_with_the_simulator_the_graph_log_counts():
    with count_graphs() as graphs:
        _twice_two_shapes("neuron", device="neuron")
    assert graphs.source == "graph_log"
    assert graphs.count == 2
    assert [r["status"] for r in graphs.records] == ["compiled", "compiled"]


@pytest.mark.skipif(not hf_neuron.simulator.is_simulated(), reason="reads the simulator's graph log")
def test_the_graph_log_sees_only_the_neuron_backend():
    with count_graphs() as graphs:
        _twice_two_shapes("eager")
    assert graphs.count == 0


def test_count_is_final_after_the_block(monkeypatch):
    monkeypatch.setattr(hf_neuron.simulator, "is_simulated", lambda: False)
    with count_graphs() as graphs:
        _twice_two_shapes("eager")
    torch._dynamo.reset()
    _twice_two_shapes("eager")
    assert graphs.count == 2
