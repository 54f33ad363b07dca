"""A saved PEFT adapter loads on a machine with a Neuron device: onto a model on neuron or on the host,
with the weights it was saved with and CPU's logits (``peft.adapter_weights_through_host``)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils.save_and_load import load_peft_weights

from hf_neuron.patching import upstream_behaviour
from hf_neuron.peft.adapter_loading import FIX_NAME
from hf_neuron.tiny_models import build_model

IDS = torch.tensor([[5, 17, 42, 8, 99, 3]])


@pytest.fixture(scope="module")
def saved_adapter(tmp_path_factory):
    """A LoRA adapter with non-zero weights (``init_lora_weights=False``), saved; its weights and the
    adapted model's CPU logits."""
    torch.manual_seed(0)
    model = get_peft_model(build_model("llama"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                            init_lora_weights=False)).eval()
    folder = tmp_path_factory.mktemp("lora")
    model.save_pretrained(folder)
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items() if ".lora_" in name}
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
    return folder, weights, logits


def _lora_state(model) -> dict:
    return {name: tensor for name, tensor in model.state_dict().items() if ".lora_" in name}


@pytest.mark.parametrize("base_device", ["neuron", "cpu"])
def test_the_adapter_loads_with_its_weights_and_cpus_logits(saved_adapter, base_device):
    folder, weights, logits = saved_adapter
    # torch_device="neuron" is what PEFT 0.22 infers on a Neuron machine (earlier releases infer cpu)
    for torch_device in (None, "neuron"):
        model = PeftModel.from_pretrained(build_model("llama").to(base_device), folder,
                                          torch_device=torch_device).eval()
        loaded = _lora_state(model)
        assert sorted(loaded) == sorted(weights)
        for name, tensor in loaded.items():
            assert tensor.device.type == base_device, name
            assert torch.equal(tensor.cpu(), weights[name]), name
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids=IDS.to(base_device)).logits.cpu(), logits,
                                       atol=1e-5, rtol=1e-5)


def test_the_weights_are_returned_on_the_neuron_device_asked_for(saved_adapter, neuron):
    folder, weights, _ = saved_adapter
    loaded = load_peft_weights(str(folder), device="neuron")
    assert loaded and all(tensor.device == neuron for tensor in loaded.values())
    saved = {name.replace(".default.", "."): tensor for name, tensor in weights.items()}
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(tensor.cpu(), saved[name]) for name, tensor in loaded.items())
    assert load_peft_weights(str(folder), device="cpu")[next(iter(saved))].device.type == "cpu"


def test_without_the_fix_no_adapter_loads_onto_neuron(saved_adapter):
    folder, _, _ = saved_adapter
    with upstream_behaviour(FIX_NAME), pytest.raises(Exception, match="neuron"):
        load_peft_weights(str(folder), device="neuron")
