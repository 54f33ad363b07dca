"""Multimodal models run text-only compile on Neuron (placeholder ids zeroed with static shapes):
generate compiles 2 graphs (one prefill chunk, one decode step) with the CPU tokens."""

from __future__ import annotations

import pytest
import torch

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.testing.generation_workload import generate_batches, generate_counting_graphs, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers import import_fix_targets
from hf_neuron.transformers.models import _placeholder_ids, kimi_k25, muse_glimmer

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16, "cache_implementation": "static"}
LENGTHS = (7, 20)  # one and two prefill chunks


@pytest.fixture(autouse=True, scope="module")
def fixes_applied():
    import_fix_targets()


def _graphs_and_tokens(model, prompts):
    return generate_counting_graphs(model, prompts, 1, max_new_tokens=3, **SIZES)


@pytest.mark.parametrize("model_type, fix_name", [
    ("kimi_k25", "kimi-k25-placeholder-ids-static-shape"),
    ("muse_glimmer", "muse-glimmer-placeholder-ids-static-shape"),
])
def test_generate_compiles_two_graphs_with_the_cpu_tokens(model_type, fix_name, fresh_dynamo):
    assert get_fix(fix_name).active, get_fix(fix_name).reason
    model = build_model(model_type).eval()
    prompts = workload_prompts(model.config.get_text_config().vocab_size, LENGTHS)
    expected = generate_batches(model, prompts, 1, max_new_tokens=3)  # CPU, eager, dynamic cache
    model.to("neuron")

    with upstream_behaviour(fix_name), pytest.raises(Exception):
        _graphs_and_tokens(model, prompts)
    count, tokens = _graphs_and_tokens(model, prompts)

    assert count == 2
    for got, want in zip(tokens, expected):
        assert torch.equal(got, want)


def test_static_shape_ids_equal_the_masked_write():
    config = type("Config", (), {"image_token_id": 5, "video_token_id": 7})()
    input_ids = torch.tensor([[1, 5, 7, 9, 5], [7, 7, 2, 3, 4]])
    upstream = input_ids.clone()
    upstream[(input_ids == 5) | (input_ids == 7)] = 0
    assert torch.equal(input_ids.masked_fill(_placeholder_ids.placeholder_mask(config, input_ids), 0), upstream)


def test_cpu_models_keep_upstream_embedding(monkeypatch):
    """Without a neuron device the forward is upstream's (the wrapper passes the call through)."""
    model = build_model("kimi_k25").eval()
    calls = []
    embed = model.model.get_input_embeddings()
    monkeypatch.setattr(_placeholder_ids, "placeholder_mask", lambda *a: calls.append(a))
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        model(input_ids=ids)
    assert calls == [] and embed is model.model.get_input_embeddings()


def test_detections_see_the_gaps_on_the_installed_release():
    for fix_name in (kimi_k25.FIX_NAME, muse_glimmer.FIX_NAME):
        assert get_fix(fix_name).active, get_fix(fix_name).reason
