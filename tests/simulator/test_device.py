"""The `neuron` device and the `torch.neuron` module surface."""

import torch

import hf_neuron.simulator as sim


def test_device_type_is_neuron():
    x = torch.ones(2, 3, device="neuron")
    assert x.device.type == "neuron"
    assert x.is_neuron
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert sim.is_simulated()


def test_factory_functions_on_neuron():
    for make in (
        lambda: torch.zeros(3, device="neuron"),
        lambda: torch.ones(3, device="neuron"),
        lambda: torch.full((3,), 2.0, device="neuron"),
        lambda: torch.arange(3, device="neuron"),
        lambda: torch.empty(3, device="neuron"),
        lambda: torch.eye(3, device="neuron"),
        lambda: torch.linspace(0, 1, 5, device="neuron"),
        lambda: torch.randn(3, device="neuron"),
        lambda: torch.tensor([1.0, 2.0], device="neuron"),
    ):
        t = make()
        assert t.device.type == "neuron"


def test_to_and_back():
    cpu = torch.randn(4, 5)
    n = cpu.to("neuron")
    assert n.device == torch.device("neuron", 0)
    assert torch.equal(n.cpu(), cpu)
    assert torch.equal(cpu.neuron().cpu(), cpu)
    assert torch.nn.Linear(2, 2).neuron().weight.device.type == "neuron"
    assert torch.equal(n.to("neuron:1").cpu(), cpu)
    assert n.to("neuron:1").device.index == 1


def test_device_module_surface():
    m = torch.neuron
    assert m.is_available()
    assert m.device_count() == 4
    assert m.get_device_name(2) == "neuron:2"
    props = m.get_device_properties(0)
    assert props.name == "trn2"
    assert props.total_memory == 24 << 30
    assert m.is_bf16_supported()
    assert set(m.get_amp_supported_dtype()) == {torch.float32, torch.float16, torch.bfloat16}
    m.synchronize()
    prev = m.current_device()
    with m.device(1):
        assert m.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
    assert m.current_device() == prev


def test_memory_figures_come_from_the_allocator():
    m = torch.neuron
    m.reset_peak_memory_stats()
    before = m.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
    assert m.memory_allocated() - before == 1 << 20
    free, total = m.mem_get_info()
    assert total == 24 << 30 and free == total - m.memory_allocated()
    del x
    assert m.memory_allocated() == before
    assert m.max_memory_allocated() >= before + (1 << 20)
    stats = m.memory_stats()
    assert stats["allocated_bytes.all.peak"] == m.max_memory_allocated()
    assert "neuron:0" in m.memory_summary()


def test_simulated_out_of_memory_is_a_clear_error():
    import pytest

    with pytest.raises(torch.OutOfMemoryError, match="Neuron out of memory"):
        torch.empty(25 << 30, dtype=torch.uint8, device="neuron")


def test_invalid_device_index():
    import pytest

    with pytest.raises(RuntimeError, match="neuron device"):
        torch.empty(1, device="neuron:7")


def test_import_torch_neuronx_is_the_simulator():
    import torch_neuronx
    from transformers.utils import is_torch_neuron_available

    assert torch_neuronx.SIMULATED
    assert "simulated" in repr(torch_neuronx)
    assert is_torch_neuron_available()


def test_streams_and_events_complete_immediately():
    s = torch.neuron.current_stream()
    assert s.device.type == "neuron"
    e = torch.Event(device="neuron")
    e.record()
    assert e.query()
    assert torch.neuron.Stream().device.type == "neuron"
    ev = torch.neuron.Event()
    ev.record(torch.neuron.Stream())
    ev.synchronize()
