"""Shared fixtures of the Transformers adapter tests (the simulator is installed by tests/conftest.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_cpu_thread():
    # Tiny models on a shared 2-core runner: intra-op threads only contend (eager runs ~10x slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_dynamo():
    """Every test counts the graphs it compiles from an empty Dynamo cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    from hf_neuron.testing.tiny_models import save_tiny_model

    return save_tiny_model("llama", tmp_path_factory.mktemp("tiny-llama"))
