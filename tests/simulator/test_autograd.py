"""Autograd and optimizers on neuron give CPU's numbers bit for bit."""

import pytest
import torch
import torch.nn as nn


def test_backward_matches_cpu():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    dev = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = torch.randn(5, 8)
    cpu(x).pow(2).mean().backward()
    dev(x.to("neuron")).pow(2).mean().backward()
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        assert p_dev.grad.device.type == "neuron"
        assert torch.equal(p_cpu.grad, p_dev.grad.cpu())


@pytest.mark.parametrize("foreach,fused", [(False, False), (True, False), (False, True)])
def test_adamw_matches_cpu(foreach, fused):
    torch.manual_seed(0)
    p_cpu = nn.Parameter(torch.randn(7, 3))
    p_dev = nn.Parameter(p_cpu.detach().clone().to("neuron"))
    opt_cpu = torch.optim.AdamW([p_cpu], lr=0.1, foreach=foreach, fused=fused)
    opt_dev = torch.optim.AdamW([p_dev], lr=0.1, foreach=foreach, fused=fused)
    for step in range(3):
        g = torch.randn(7, 3)
        p_cpu.grad, p_dev.grad = g, g.to("neuron")
        opt_cpu.step()
        opt_dev.step()
    assert torch.equal(p_cpu.detach(), p_dev.detach().cpu())
    assert opt_dev.state[p_dev]["exp_avg"].device.type == "neuron"
