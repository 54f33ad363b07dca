"""device_map on Neuron devices: "neuron" pinned to LOCAL_RANK, explicit devices, "auto" on neuron memory."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers.modeling_utils as modeling_utils
from transformers import AutoModelForCausalLM

import hf_neuron
from hf_neuron.patching import get_fix
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.loading import placement


def check_and_set_device_map(device_map):
    # Looked up at call time: the name from_pretrained uses, patched when modeling_utils is imported.
    return modeling_utils.check_and_set_device_map(device_map)


def _devices(model):
    return {str(p.device) for p in model.parameters()}


def _load(path, **kwargs):
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def test_neuron_means_local_rank(tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert _devices(_load(tiny_llama_dir, device_map="neuron")) == {"neuron:2"}
    assert check_and_set_device_map(torch.device("neuron")) == {"": torch.device("neuron", 2)}


def test_neuron_without_local_rank_is_the_callers_current_device(tiny_llama_dir, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    previous = torch.neuron.current_device()
    torch.neuron.set_device(3)
    try:
        assert _devices(_load(tiny_llama_dir, device_map="neuron")) == {"neuron:3"}
    finally:
        torch.neuron.set_device(previous)


def test_upstream_leaves_neuron_unindexed():
    with upstream_behaviour(placement.DEVICE_MAP_FIX):
        assert check_and_set_device_map("neuron") == {"": torch.device("neuron")}
    assert check_and_set_device_map("neuron")[""].index is not None


@pytest.mark.parametrize(
    "device_map, expected",
    [("neuron:1", {"neuron:1"}), ({"": "neuron:2"}, {"neuron:2"}), ({"": "neuron"}, {"neuron:0"})],
)
def test_explicit_neuron_maps(tiny_llama_dir, device_map, expected, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert _devices(_load(tiny_llama_dir, device_map=device_map)) == expected


@pytest.mark.parametrize("device_map", ["auto", "balanced", "sequential"])
def test_auto_maps_put_every_parameter_on_neuron(tiny_llama_dir, device_map):
    model = _load(tiny_llama_dir, device_map=device_map)
    assert {d.split(":")[0] for d in _devices(model)} == {"neuron"}


def test_upstream_auto_map_is_cpu(tiny_llama_dir):
    """Where the fix applies, upstream's "auto" map is the CPU; where it decided upstream closes the gap
    (accelerate 1.16), upstream's own map is on the neuron devices."""
    with upstream_behaviour(placement.MAX_MEMORY_FIX):
        devices = _devices(_load(tiny_llama_dir, device_map="auto"))
    if get_fix(placement.MAX_MEMORY_FIX).active:
        assert devices == {"cpu"}
    else:
        assert {d.split(":")[0] for d in devices} == {"neuron"}, devices


def test_deciding_the_fix_touches_no_device():
    """Accelerate 1.16's ``get_max_memory()`` creates a tensor on every device: a detector calling it at
    import would initialise the Neuron runtime before ``init_process_group``."""
    code = (
        "import torch\n"
        "from hf_neuron.patching import get_fix\n"
        "from hf_neuron.simulator.distributed import neuron_allocations\n"
        "import transformers.modeling_utils\n"
        f"fix = get_fix({placement.MAX_MEMORY_FIX!r})\n"
        "print('DECIDED', fix.decided, 'ALLOCATIONS', neuron_allocations())\n"
    )
    env = {**os.environ, "HF_NEURON_SIMULATOR": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "DECIDED True ALLOCATIONS 0" in result.stdout, result.stdout + result.stderr[-3000:]


def test_auto_spills_to_cpu_only_when_it_does_not_fit(tiny_llama_dir):
    model = _load(tiny_llama_dir, device_map="sequential", max_memory={0: "300KB", "cpu": "1GB"})
    assert set(model.hf_device_map.values()) == {0, "cpu"}
    assert model.hf_device_map["model.embed_tokens"] == 0


def test_auto_memory_figures_come_from_torch_neuron():
    import transformers.integrations.accelerate as hf_accelerate

    memory = hf_accelerate.get_max_memory()
    assert [k for k in memory if isinstance(k, int)] == list(range(torch.neuron.device_count()))
    assert memory[0] <= torch.neuron.get_device_properties(0).total_memory


def test_a_plain_process_gets_upstream_behaviour(tiny_llama_dir):
    """Without the simulator or TorchNeuron, hf_neuron changes nothing: upstream's own error, unchanged."""
    code = (
        "from transformers import AutoModelForCausalLM\n"
        f"AutoModelForCausalLM.from_pretrained({str(tiny_llama_dir)!r}, device_map='neuron')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_NEURON_SIMULATOR"}
    env["HF_NEURON_SIMULATOR"] = "0"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "but found neuron" in result.stderr
    # No frame of the traceback runs hf_neuron's code (its cache folder may appear in paths: that is not code).
    package = str(Path(hf_neuron.__file__).parent)
    assert package not in result.stderr and "hf_neuron." not in result.stderr
