"""Views, in-place ops and device checks behave exactly as on CPU."""

import pytest
import torch


def test_inplace_on_view_shows_in_base():
    x = torch.arange(6.0, device="neuron")
    x[1:].add_(1)
    assert x.cpu().tolist() == [0.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_static_cache_index_copy_into_view():
    cache = torch.zeros(2, 4, 8, device="neuron")
    layer = cache[1]
    layer.index_copy_(0, torch.tensor([2], device="neuron"), torch.ones(1, 8, device="neuron"))
    expected = torch.zeros(2, 4, 8)
    expected[1, 2] = 1
    assert torch.equal(cache.cpu(), expected)


def test_views_share_memory_with_base():
    x = torch.zeros(4, 4, device="neuron")
    x.t()[0].fill_(3)
    x.view(16)[15] = 7
    x.diagonal().mul_(2)
    ref = torch.zeros(4, 4)
    ref.t()[0].fill_(3)
    ref.view(16)[15] = 7
    ref.diagonal().mul_(2)
    assert torch.equal(x.cpu(), ref)


def test_out_argument_is_resized_and_written():
    out = torch.empty(0, device="neuron")
    torch.add(torch.ones(3, device="neuron"), 1, out=out)
    assert out.shape == (3,) and out.cpu().tolist() == [2.0, 2.0, 2.0]


def test_mixing_with_cpu_tensor_raises_like_cuda():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="neuron") + torch.ones(3)


def test_cpu_scalar_tensor_and_cpu_indices_are_allowed():
    x = torch.arange(5.0, device="neuron")
    assert (x + torch.tensor(2.0)).cpu().tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert x[torch.tensor([0, 4])].cpu().tolist() == [0.0, 4.0]


def test_channels_last_raises_torchneuron_error():
    with pytest.raises(RuntimeError, match="Neuron tensors only support contiguous or preserve memory format"):
        torch.empty(1, 3, 4, 4, device="neuron", memory_format=torch.channels_last)
    with pytest.raises(RuntimeError, match="only support contiguous or preserve memory format"):
        torch.ones(1, 3, 4, 4, device="neuron").contiguous(memory_format=torch.channels_last)


def test_sparse_result_warns_it_runs_on_cpu():
    x = torch.eye(3, device="neuron")
    with pytest.warns(UserWarning, match="runs on the CPU"):
        s = x.to_sparse()
    assert torch.equal(s.to_dense(), torch.eye(3))


def test_forward_mode_ad_warns_it_runs_on_cpu():
    import torch.autograd.forward_ad as fwad

    x = torch.ones(2, device="neuron")
    with fwad.dual_level():
        with pytest.warns(UserWarning, match="Forward-mode AD has no Neuron kernels"):
            fwad.make_dual(x, torch.ones(2, device="neuron"))


def test_many_ops_match_cpu():
    torch.manual_seed(0)
    a = torch.randn(4, 6)
    b = torch.randn(6, 5)
    an, bn = a.to("neuron"), b.to("neuron")
    checks = [
        (a @ b, an @ bn),
        (a.softmax(-1), an.softmax(-1)),
        (torch.cat([a, a]), torch.cat([an, an])),
        (a.sort(-1).values, an.sort(-1).values),
        (a.topk(2).indices, an.topk(2).indices),
        (torch.nonzero(a > 0), torch.nonzero(an > 0)),
        (a.cumsum(0), an.cumsum(0)),
        (torch.where(a > 0, a, 0.0), torch.where(an > 0, an, 0.0)),
        (a.masked_fill(a > 0, -1), an.masked_fill(an > 0, -1)),
        (torch.nn.functional.gelu(a), torch.nn.functional.gelu(an)),
        (a.chunk(2, -1)[1], an.chunk(2, -1)[1]),
    ]
    for ref, got in checks:
        assert got.device.type == "neuron"
        assert torch.equal(ref, got.cpu())


def test_conjugate_and_negative_views_copy_correctly():
    x = torch.randn(3, dtype=torch.cfloat)
    n = x.to("neuron")
    assert torch.equal(n.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(n.conj().cpu(), x.conj().resolve_conj())
    out = torch.empty(3, dtype=torch.cfloat, device="neuron")
    out.copy_(n.conj())
    assert torch.equal(out.cpu(), x.conj().resolve_conj())
    assert torch.equal(n.conj().imag.neg().cpu(), -x.conj().imag)


def test_integer_histc_counts_like_an_accelerator():
    ids = torch.tensor([0, 3, 3, 1, 3], device="neuron")
    counts = torch.histc(ids, bins=4, min=0, max=3)
    assert counts.dtype == torch.int64
    assert counts.cpu().tolist() == [1, 1, 0, 3]
    floats = torch.tensor([0.5, 1.5, 1.7])
    assert torch.equal(torch.histc(floats.to("neuron"), bins=2, min=0, max=2).cpu(), torch.histc(floats, 2, 0, 2))


def test_convolution_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(4, 4, kernel_size=3, groups=4, padding=2)
    conv_n = torch.nn.Conv1d(4, 4, kernel_size=3, groups=4, padding=2)
    conv_n.load_state_dict(conv.state_dict())
    conv_n.to("neuron")
    x = torch.randn(2, 4, 9)
    xn = x.to("neuron").requires_grad_()
    x.requires_grad_()
    conv(x).sum().backward()
    out = conv_n(xn)
    out.sum().backward()
    assert torch.equal(out.cpu(), conv(x).detach())
    assert torch.equal(xn.grad.cpu(), x.grad)
    assert torch.equal(conv_n.weight.grad.cpu(), conv.weight.grad)
    assert torch.equal(conv_n.bias.grad.cpu(), conv.bias.grad)


def test_padding_a_permuted_tensor_does_not_ask_for_channels_last():
    x = torch.randn(2, 3, 4, 5).permute(0, 2, 3, 1)
    padded = torch.nn.functional.pad(x.to("neuron"), (0, 0, 1, 1))
    assert torch.equal(padded.cpu(), torch.nn.functional.pad(x, (0, 0, 1, 1)))
