"""Models given by name to a TRL trainer load straight onto the process's Neuron device, or unplaced
(``device_map=None``) when a ``distributed_config`` shards them at load time (``trl.neuron_device_map``)."""

from __future__ import annotations

import functools

import pytest
import torch
from datasets import load_dataset

from hf_neuron.patching import original
from hf_neuron.trl import model_loading


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """accelerate's process state is made once per process: a trainer that an earlier test in this pytest
    worker made on CPU (``use_cpu=True``) would leave its device behind for these tests."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _capture():
    calls = []

    def fake_create_model_from_path(model_id, **kwargs):
        calls.append(kwargs)
        return kwargs

    return calls, functools.partial(model_loading.create_model_on_neuron, fake_create_model_from_path)


def test_default_is_the_process_device():
    calls, create = _capture()
    create("some/model", dtype="bfloat16")
    assert calls[-1]["device_map"] == torch.device("neuron", torch.neuron.current_device())


@pytest.mark.parametrize("config", ["object", "dict"])
def test_sharded_at_load_gets_no_device_map(config):
    from transformers import DistributedConfig

    dc = DistributedConfig(tp_size=2, fsdp_size=2)
    calls, create = _capture()
    create("some/model", distributed_config=dc if config == "object" else dc.to_dict())
    assert calls[-1]["device_map"] is None


def test_trivial_distributed_config_still_places_on_device():
    from transformers import DistributedConfig

    calls, create = _capture()
    create("some/model", distributed_config=DistributedConfig(tp_size=1, fsdp_size=1))
    assert calls[-1]["device_map"].type == "neuron"


@pytest.mark.parametrize("user_value", ["cpu", "auto", None])
def test_user_device_map_wins(user_value):
    calls, create = _capture()
    create("some/model", device_map=user_value)
    assert calls[-1]["device_map"] == user_value


def test_upstream_default_rejects_tensor_parallel_loading(tiny_model_dir):
    """The gap: TRL's own default ("auto" on any accelerator) and DistributedConfig(tp_size>1) exclude each other."""
    import trl.trainer.utils  # noqa: F401  (TRL imports it lazily; our fix patches it on import)
    from transformers import DistributedConfig

    upstream = original(trl.trainer.utils, "create_model_from_path")
    assert upstream is not trl.trainer.utils.create_model_from_path  # the fix is on; this is the original
    with pytest.raises(ValueError, match="mutually exclusive"):
        upstream(str(tiny_model_dir), distributed_config=DistributedConfig(tp_size=2))


def test_sft_trainer_loads_model_on_neuron(tiny_model_dir, chat_dataset, tmp_path, monkeypatch):
    import transformers
    from trl import SFTConfig, SFTTrainer

    cls = transformers.Qwen3ForCausalLM
    original = cls.from_pretrained.__func__
    seen = []

    def from_pretrained(klass, *args, **kwargs):
        seen.append(kwargs.get("device_map"))
        return original(klass, *args, **kwargs)

    monkeypatch.setattr(cls, "from_pretrained", classmethod(from_pretrained))
    train = load_dataset("json", data_files=str(chat_dataset), split="train").select_columns(["messages"])
    args = SFTConfig(
        output_dir=str(tmp_path), report_to="none", max_length=64, bf16=False, gradient_checkpointing=False
    )
    trainer = SFTTrainer(model=str(tiny_model_dir), args=args, train_dataset=train)

    device = torch.device("neuron", torch.neuron.current_device())
    assert seen == [device]  # from_pretrained put the weights on the device (not on the host, moved afterwards)
    assert {p.device for p in trainer.model.parameters()} == {device}
