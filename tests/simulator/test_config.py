"""How many devices the simulated host has, from the environment."""

import pytest

from hf_neuron.simulator import config


def host(monkeypatch, **env):
    for key in ("NEURON_LOGICAL_NC_CONFIG", "HF_NEURON_SIM_CHIPS", "LOCAL_WORLD_SIZE", "HF_NEURON_SIM_DEVICES",
                "NEURON_RT_VISIBLE_CORES", "HF_NEURON_SIM_INSTANCE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return config.host_from_env()


def test_default_is_one_trn2_chip_at_lnc2(monkeypatch):
    h = host(monkeypatch)
    assert (h.device_count, h.bytes_per_device, h.instance_family) == (4, 24 << 30, "trn2")


def test_lnc1_gives_eight_smaller_devices(monkeypatch):
    h = host(monkeypatch, NEURON_LOGICAL_NC_CONFIG="1")
    assert (h.device_count, h.bytes_per_device) == (8, 12 << 30)


def test_grows_to_local_world_size(monkeypatch):
    assert host(monkeypatch, LOCAL_WORLD_SIZE="8").device_count == 8


def test_trn3_memory(monkeypatch):
    assert host(monkeypatch, HF_NEURON_SIM_INSTANCE="trn3").bytes_per_device == 36 << 30


def test_visible_cores_range(monkeypatch):
    assert host(monkeypatch, NEURON_RT_VISIBLE_CORES="1-2").device_count == 2


@pytest.mark.parametrize(
    "env",
    [{"NEURON_LOGICAL_NC_CONFIG": "3"}, {"NEURON_RT_VISIBLE_CORES": "a-b"}, {"HF_NEURON_SIM_INSTANCE": "trn9"},
     {"HF_NEURON_SIM_DEVICES": "500"}],
)
def test_bad_settings_are_clear_errors(monkeypatch, env):
    with pytest.raises(config.SimulatorConfigError):
        host(monkeypatch, **env)
