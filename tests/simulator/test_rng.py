"""Seeded random numbers on neuron equal CPU's."""

import torch


def test_global_seed_gives_cpu_numbers():
    torch.manual_seed(123)
    a = torch.randn(5, device="neuron")
    b = torch.rand(5, device="neuron")
    torch.manual_seed(123)
    assert torch.equal(a.cpu(), torch.randn(5))
    assert torch.equal(b.cpu(), torch.rand(5))


def test_neuron_generator():
    g = torch.Generator(device="neuron").manual_seed(7)
    x = torch.randn(4, device="neuron", generator=g)
    assert torch.equal(x.cpu(), torch.randn(4, generator=torch.Generator().manual_seed(7)))


def test_dropout_mask_matches_cpu():
    torch.manual_seed(3)
    a = torch.nn.functional.dropout(torch.ones(100, device="neuron"), 0.5)
    torch.manual_seed(3)
    assert torch.equal(a.cpu(), torch.nn.functional.dropout(torch.ones(100), 0.5))


def test_rng_state_round_trip():
    state = torch.neuron.get_rng_state()
    a = torch.randn(3, device="neuron")
    torch.neuron.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(3, device="neuron").cpu())
