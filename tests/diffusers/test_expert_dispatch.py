"""HiDream's MoE feed-forward on a neuron device: one graph, the same output as upstream's routed loop on CPU."""

from __future__ import annotations

import copy

import diffusers  # noqa: F401  (activates the adapter)
import torch
from diffusers.models.transformers import transformer_hidream_image as hidream

from hf_neuron.diffusers.expert_dispatch import FIX_NAME
from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.patching.tracing import traces_whole


def _layer():
    torch.manual_seed(0)
    return hidream.MOEFeedForwardSwiGLU(dim=16, hidden_dim=32, num_routed_experts=4, num_activated_experts=2).eval()


def test_fix_is_active():
    assert get_fix(FIX_NAME).active, get_fix(FIX_NAME).reason


def test_layer_traces_whole_on_neuron_only(neuron):
    layer = _layer()
    hidden = torch.randn(2, 5, 16)
    assert not traces_whole(layer, hidden)  # CPU: upstream's loop, unchanged
    layer.to(neuron)
    assert traces_whole(layer, hidden.to(neuron))
    with upstream_behaviour(FIX_NAME):
        assert not traces_whole(layer, hidden.to(neuron))


def test_dense_dispatch_equals_the_routed_loop(neuron):
    layer = _layer()
    hidden = torch.randn(2, 7, 16)
    with torch.no_grad():
        expected = layer(hidden)
        on_device = copy.deepcopy(layer).to(neuron)
        eager = on_device(hidden.to(neuron)).cpu()
        compiled = torch.compile(on_device, backend="neuron", fullgraph=True, dynamic=False)(hidden.to(neuron)).cpu()
    # Some expert is left unchosen by some token, so the zero weights are exercised.
    _, top_k_weight, _ = layer.gate(hidden)
    assert top_k_weight.shape == (14, 2)
    torch.testing.assert_close(eager, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(compiled, expected, atol=1e-6, rtol=1e-5)
