"""Weights loaded to a neuron device are loaded without the thread pool, unless the user decided."""

import pytest
import transformers.core_model_loading as core_model_loading
from transformers import AutoModelForCausalLM

from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.loading.synchronous import ENV, FIX_NAME


@pytest.fixture
def pools(monkeypatch):
    created = []
    real = core_model_loading.ThreadPoolExecutor

    def recording(*args, **kwargs):
        created.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(core_model_loading, "ThreadPoolExecutor", recording)
    monkeypatch.delenv(ENV, raising=False)
    return created


def test_neuron_load_is_synchronous(tiny_llama_dir, pools):
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir, device_map="neuron")
    assert pools == []


def test_upstream_uses_threads_on_neuron(tiny_llama_dir, pools):
    with upstream_behaviour(FIX_NAME):
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir, device_map="neuron")
    assert len(pools) == 1


def test_cpu_load_keeps_threads(tiny_llama_dir, pools):
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    assert len(pools) == 1


def test_user_setting_wins(tiny_llama_dir, pools, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir, device_map="neuron")
    assert len(pools) == 1
