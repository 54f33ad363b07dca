"""Tensor parallelism on Neuron: DistributedConfig(tp_size=N) over the "neuron" process group gives
the greedy tokens of the single-device run for prompts of four lengths at batch sizes 1 and 2, compiling
2 graphs per rank and batch size (the graphs `hf-neuron plan --tp N` predicts); bad layouts fail early."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, DistributedConfig

from hf_neuron.simulator import graph_log
from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.tiny_models import build_model, save_tiny_model
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.plan import plan_generation, planned_shapes
from hf_neuron.transformers.tensor_parallel import embeddings, plan_support

WORKER = Path(__file__).with_name("_tp_worker.py")
ARCHITECTURES = ("llama", "qwen3", "qwen3_moe")  # dense, dense with q/k norms, mixture of experts


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp-models")
    # 4 KV heads so that tp_size 2 and 4 both split heads evenly.
    return [str(save_tiny_model(arch, root / arch, num_key_value_heads=4)) for arch in ARCHITECTURES]


def _single_device_tokens(path):
    sys.path.insert(0, str(WORKER.parent))
    try:
        from _tp_worker import BATCH_SIZES, GENERATE, PROMPT_LENGTHS
    finally:
        sys.path.pop(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS)
    return {
        str(batch): [t.tolist() for t in generate_batches(model, prompts, batch, max_new_tokens=GENERATE["max_new_tokens"])]
        for batch in BATCH_SIZES
    }


@pytest.mark.distributed
@pytest.mark.parametrize("tp_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_tp_generation_matches_single_device(tiny_dirs, tp_size, tmp_path):
    out, log = tmp_path / "tokens.json", tmp_path / "graphs.jsonl"
    env = dict(os.environ, HF_NEURON_SIMULATOR="1", HF_NEURON_GRAPH_LOG=str(log), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={tp_size}", str(WORKER), str(out)]
    result = subprocess.run([*command, *tiny_dirs], env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]
    tokens = json.loads(out.read_text())
    for path in tiny_dirs:
        assert tokens[path] == _single_device_tokens(path), path
    graphs = graph_log.read_log(log)
    assert all(g["status"] == "compiled" for g in graphs)
    for rank in range(tp_size):
        # prefill chunk + decode, per batch size and model
        assert sum(g["rank"] == rank for g in graphs) == 2 * 2 * len(tiny_dirs)
    # `hf-neuron plan --tp N` predicted exactly these graphs for every rank
    from _tp_worker import BATCH_SIZES, GENERATE

    planned = sorted(shape for path in tiny_dirs for shape in planned_shapes(
        plan_generation(path, BATCH_SIZES, GENERATE["max_cache_len"], GENERATE["prefill_chunk_size"], tp=tp_size)))
    for rank in range(tp_size):
        assert sorted(graph_log.input_shape(g) for g in graphs if g["rank"] == rank) == planned


def _meta_model(arch, **overrides):
    with torch.device("meta"):
        return build_model(arch, **overrides)


@pytest.mark.parametrize(
    "overrides, tp_size, constraint",
    [({}, 3, "num_attention_heads=4 is not divisible by tp_size=3"),
     ({"num_key_value_heads": 2}, 4, "num_key_value_heads=2 is not divisible by tp_size=4")],
)
def test_heads_that_do_not_split_raise_before_loading(overrides, tp_size, constraint):
    model = _meta_model("qwen3", **overrides)
    with pytest.raises(ValueError, match="Qwen3ForCausalLM") as error:
        model._resolve_parallel_plans(DistributedConfig(tp_size=tp_size))
    assert constraint in str(error.value)


def test_upstream_accepts_heads_that_do_not_split():
    with upstream_behaviour(plan_support.PLAN_FIX):
        _meta_model("qwen3")._resolve_parallel_plans(DistributedConfig(tp_size=3))


def test_architecture_without_plan_is_named():
    with pytest.raises(ValueError, match="Mamba2ForCausalLM` has no `tp_plan`"):
        _meta_model("mamba2")._resolve_parallel_plans(DistributedConfig(tp_size=2))


def _embedding_mask_ops():
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial
    from torch.fx.experimental.proxy_tensor import make_fx

    def embedding_masks(ids, output):
        mask, masked = _MaskPartial._mask_tensor(ids, 2, 3)
        buffer = MaskBuffer()
        buffer.materialize_mask(mask)
        buffer.apply_mask(output)
        return masked, output

    ids, out = torch.arange(8), torch.ones(8, 2)
    graph = make_fx(embedding_masks)(ids, out.clone())
    return {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}, embedding_masks(ids, out)


def test_vocab_parallel_masks_have_no_boolean_index_put():
    ops, (masked, output) = _embedding_mask_ops()
    assert not any("index_put" in op for op in ops)
    assert masked.tolist() == [0, 0, 0, 1, 2, 0, 0, 0]
    assert output[:, 0].tolist() == [0, 0, 1, 1, 1, 0, 0, 0]
    with upstream_behaviour(embeddings.MASK_FIX):
        upstream_ops, (upstream_masked, upstream_output) = _embedding_mask_ops()
    assert any("index_put" in op for op in upstream_ops)
    assert torch.equal(upstream_masked, masked) and torch.equal(upstream_output, output)
