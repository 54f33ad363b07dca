"""torch.save / torch.load of neuron tensors."""

import io

import torch


def test_save_load_round_trip(tmp_path):
    state = {"w": torch.randn(3, 4, device="neuron"), "step": torch.tensor(5, device="neuron")}
    path = tmp_path / "state.pt"
    torch.save(state, path)
    loaded = torch.load(path)
    assert loaded["w"].device.type == "neuron"
    assert torch.equal(loaded["w"].cpu(), state["w"].cpu())
    cpu = torch.load(path, map_location="cpu")
    assert cpu["w"].device.type == "cpu" and torch.equal(cpu["w"], state["w"].cpu())


def test_pinned_memory():
    t = torch.ones(3).pin_memory()
    assert t.is_pinned()
    assert not torch.ones(3).is_pinned()


def test_buffer_round_trip():
    buf = io.BytesIO()
    torch.save(torch.arange(4, device="neuron"), buf)
    buf.seek(0)
    assert torch.load(buf).cpu().tolist() == [0, 1, 2, 3]
