"""DBRX's and LongCat-Flash's expert layers run upstream's static experts function on Neuron: their
generation compiles one prefill-chunk graph and one decode graph, with the CPU tokens, and the expert
layers give the CPU outputs and gradients. Off Neuron their forward is upstream's own loop. Where
upstream's own experts dispatch closes the gap (LongCat-Flash's decorated experts), upstream gives all that."""

from __future__ import annotations

import copy

import pytest
import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import APPLIED, CLOSED, get_fix, upstream_behaviour
from hf_neuron.patching.tracing import traces_whole
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.generation import capture
from hf_neuron.transformers.generation.defaults import generation_compiles
from hf_neuron.transformers.models.dbrx import DBRX_FIX
from hf_neuron.transformers.models.longcat_flash import LONGCAT_FIX

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16}
GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
ARCHS = [("dbrx", DBRX_FIX), ("longcat_flash", LONGCAT_FIX)]


@pytest.fixture
def fresh_verdicts():
    """generation_compiles keeps its answer per model class and config: each test asks afresh."""
    capture._verdicts.clear()
    yield
    capture._verdicts.clear()


def _prompt(length):
    ids = torch.randint(3, 200, (1, length), generator=torch.Generator().manual_seed(length))
    return ids, torch.ones_like(ids)


def _generate_on_neuron(model, ids, mask):
    with torch.no_grad(), count_graphs() as graphs:
        out = model.generate(input_ids=ids.to("neuron"), attention_mask=mask.to("neuron"), **GREEDY, **SIZES)
    return out.cpu(), graphs.count


def _gap_closed(fix_name) -> bool:
    """Whether upstream closes the fix's gap (the tests then check upstream's own behaviour)."""
    fix = get_fix(fix_name)
    assert fix.status in (APPLIED, CLOSED), fix.reason
    return fix.status == CLOSED


def _experts_and_routing(model):
    """The first expert layer of ``model`` and a routing of 6 tokens that hits every expert."""
    experts = next(m for m in model.modules() if type(m).__name__.endswith("Experts"))
    hidden = torch.randn(6, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    total = getattr(experts, "total_experts", None) or experts.num_experts  # LongCat counts its zero experts
    index = torch.stack([torch.arange(6) % total, (torch.arange(6) + 1) % total], dim=-1)
    weights = torch.rand(6, 2, generator=torch.Generator().manual_seed(2))
    if type(experts).__name__.startswith("Dbrx"):
        hidden = hidden.view(2, 3, -1)  # DBRX's layer takes (batch, tokens, hidden)
    return experts, hidden, index, weights


@pytest.mark.parametrize(("arch", "fix_name"), ARCHS)
def test_generation_compiles_two_graphs_with_the_cpu_tokens(arch, fix_name, fresh_dynamo, fresh_verdicts):
    cpu = build_model(arch).eval()
    device = copy.deepcopy(cpu).to("neuron")
    assert generation_compiles(device) == (True, None)
    graphs = 0
    for length in (7, 20):  # one and two prefill chunks
        ids, mask = _prompt(length)
        with torch.no_grad():
            expected = cpu.generate(input_ids=ids, attention_mask=mask, **GREEDY)
        tokens, compiled = _generate_on_neuron(device, ids, mask)
        assert torch.equal(tokens, expected)
        graphs += compiled
    assert graphs <= 2
    if _gap_closed(fix_name):
        return  # what ran above is upstream's own experts dispatch

    capture._verdicts.clear()
    with upstream_behaviour(fix_name):
        compiles, why = generation_compiles(device)
        assert not compiles, why
        _, compiled = _generate_on_neuron(device, *_prompt(7))
    assert compiled == 0  # upstream's loop over the experts hit: generation runs eagerly


@pytest.mark.parametrize(("arch", "fix_name"), ARCHS)
def test_expert_layer_gives_the_cpu_outputs_and_gradients(arch, fix_name):
    model = build_model(arch)
    experts, hidden, index, weights = _experts_and_routing(model)
    weights.requires_grad_(True)
    expected = experts(hidden, index, weights)
    expected.square().sum().backward()
    cpu_grads = {name: p.grad.clone() for name, p in experts.named_parameters()}
    cpu_weight_grad = weights.grad.clone()

    experts.zero_grad()
    experts.to("neuron")
    on_neuron = weights.detach().to("neuron").requires_grad_(True)
    out = experts(hidden.to("neuron"), index.to("neuron"), on_neuron)
    out.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    torch.testing.assert_close(on_neuron.grad.cpu(), cpu_weight_grad)
    for name, p in experts.named_parameters():
        if name in cpu_grads:  # LongCat's zero experts own gate/up rows no token ever uses
            torch.testing.assert_close(p.grad.cpu(), cpu_grads[name])


@pytest.mark.parametrize(("arch", "fix_name"), ARCHS)
def test_expert_layer_traces_whole_on_neuron_only(arch, fix_name):
    model = build_model(arch)
    experts, hidden, index, weights = _experts_and_routing(model)
    closed = _gap_closed(fix_name)
    assert traces_whole(experts, hidden, index, weights) is closed  # CPU: upstream's forward, unchanged
    experts.to("neuron")
    args = (hidden.to("neuron"), index.to("neuron"), weights.to("neuron"))
    assert traces_whole(experts, *args)
    with upstream_behaviour(fix_name):
        assert traces_whole(experts, *args) is closed
