"""torch.autocast("neuron") casts like an accelerator's autocast."""

import torch


def test_autocast_bf16_linear_and_fp32_softmax():
    lin = torch.nn.Linear(8, 4).to("neuron")
    x = torch.randn(2, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = lin(x)
        s = torch.log_softmax(y, -1)
    assert y.dtype == torch.bfloat16
    assert s.dtype == torch.float32
    ref = torch.nn.functional.linear(x.cpu().bfloat16(), lin.weight.cpu().bfloat16(), lin.bias.cpu().bfloat16())
    assert torch.equal(y.cpu(), ref)


def test_autocast_disabled_outside_context():
    lin = torch.nn.Linear(8, 4).to("neuron")
    assert lin(torch.randn(2, 8, device="neuron")).dtype == torch.float32
