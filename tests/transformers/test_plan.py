"""``hf-neuron plan``: the predicted graphs equal the graph log of the real run (generation at batch 1
and 4, SFT packed; tensor parallel in test_tensor_parallel.py), and the memory estimate is within 10%
of the simulator's measured peak."""

import gc
import json
import math

import pytest
import torch

from hf_neuron.cli import main
from hf_neuron.simulator import graph_log
from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.tiny_models import build_model, save_tiny_model
from hf_neuron.transformers.plan import PlanError, plan_generation, plan_training, planned_shapes

CACHE_LEN, CHUNK = 256, 32


def measured_shapes(records):
    """``input_ids`` shapes of the recorded graphs that take ``input_ids`` (a loss graph does not)."""
    return sorted(s for s in map(graph_log.input_shape, records) if s is not None)


@pytest.mark.parametrize("arch, chunk, shapes", [
    ("llama", CHUNK, [(1, 1), (1, 32), (4, 1), (4, 32)]),  # dense
    ("mistral", CHUNK, [(1, 1), (1, 32), (4, 1), (4, 32)]),  # sliding window (not traceable on meta)
    ("llama", [8, 32], [(1, 1), (1, 8), (1, 32), (4, 1), (4, 8), (4, 32)]),  # two prefill buckets
])
def test_generation_plan_equals_the_graph_log_and_the_measured_memory(arch, chunk, shapes, tmp_path, fresh_dynamo):
    path = save_tiny_model(arch, tmp_path / arch)
    plan = plan_generation(path, [1, 4], CACHE_LEN, chunk)
    assert plan.compiled and plan.graph_count == len(shapes)

    model = build_model(arch)
    prompts = workload_prompts(model.config.vocab_size)  # 20-140 tokens: several chunks and remainders
    gc.collect()
    baseline = torch.neuron.memory_allocated()
    model.to("neuron")
    peak = 0
    with graph_log.count_graphs() as graphs:
        for batch in (1, 4):
            for start in range(0, len(prompts), batch):
                # A finished generate's static cache sits in a reference cycle until Python's collector
                # runs; measured one call at a time, as the plan states (see its note).
                gc.collect()
                torch.neuron.reset_peak_memory_stats()
                generate_batches(model, prompts[start:start + batch], batch, max_cache_len=CACHE_LEN,
                                 prefill_chunk_size=chunk, max_new_tokens=8)
                peak = max(peak, torch.neuron.max_memory_allocated() - baseline)

    assert measured_shapes(graphs.records) == planned_shapes(plan) == shapes
    assert plan.memory.weights == sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())
    if plan.memory.activations:
        assert abs(plan.memory.total - peak) <= 0.10 * peak, (plan.memory, peak)
    else:  # untraced: the note says activations are left out; weights and cache are still exact
        assert any("not traced on the meta device" in note for note in plan.notes)
        assert plan.memory.total < peak
    assert arch == "mistral" or plan.memory.activations


@pytest.mark.parametrize("arch", ["qwen3_5", "minicpm3"])  # linear-attention states; latent attention
def test_cache_memory_is_the_cache_generate_allocates(arch, tmp_path, fresh_dynamo, monkeypatch):
    """States that Transformers leaves to the first forward (and hf_neuron allocates ahead) are counted."""
    from transformers.generation.utils import GenerationMixin

    from hf_neuron.transformers.plan import _cache_bytes

    path = save_tiny_model(arch, tmp_path / arch)
    plan = plan_generation(path, [2], 64, 16)
    model = build_model(arch).to("neuron")
    prepare, caches = GenerationMixin._prepare_static_cache, []
    monkeypatch.setattr(GenerationMixin, "_prepare_static_cache",
                        lambda self, *a, **k: caches.append(prepare(self, *a, **k)) or caches[-1])
    prompt = torch.randint(3, 100, (2, 7))
    model.generate(prompt.to("neuron"), attention_mask=torch.ones_like(prompt).to("neuron"), max_new_tokens=1,
                   do_sample=False, max_cache_len=64, prefill_chunk_size=16)
    assert plan.memory.kv_cache == _cache_bytes(caches[0]) > 0


def test_sft_packed_plan_equals_the_graph_log(tmp_path, fresh_dynamo):
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    path = save_tiny_model("qwen3", tmp_path / "qwen3")
    plan = plan_training(path, max_length=128, per_device_batch=2, packing=True)
    # the plan counted its graphs in a tiny step on CPU: the trainer made next still trains on Neuron
    assert PartialState().device.type == "neuron"

    rows = [{"messages": [{"role": "user", "content": "hello there " * (i % 7 + 1)},
                          {"role": "assistant", "content": "fine thanks " * (i % 5 + 1)}]} for i in range(40)]
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_length=128, packing=True, per_device_train_batch_size=2,
                     max_steps=3, torch_compile=True, bf16=True, report_to="none", save_strategy="no",
                     logging_steps=100, disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=AutoTokenizer.from_pretrained(path))
    with graph_log.count_graphs() as graphs:
        trainer.train()

    assert graphs.count == plan.graph_count
    assert sorted(set(measured_shapes(graphs.records))) == sorted({tuple(g.input_ids) for g in plan.graphs})
    assert [(g.batch_size, g.tokens) for g in plan.graphs] == [(1, 256)]


def test_eager_architecture_is_planned_with_no_graph_and_its_reason(tmp_path, fresh_dynamo, monkeypatch):
    # DeepSeek V4 without hf_neuron's static compressed cache: generate cannot compile it (the verdict,
    # kept per model class and configuration, is kept apart from the other tests').
    from hf_neuron.patching import upstream_behaviour
    from hf_neuron.transformers.generation import capture
    from hf_neuron.transformers.models.deepseek_v4 import STATIC_CACHE_FIX

    monkeypatch.setattr(capture, "_verdicts", {})

    path = save_tiny_model("deepseek_v4", tmp_path / "deepseek_v4")
    with upstream_behaviour(STATIC_CACHE_FIX):
        plan = plan_generation(path, [1], CACHE_LEN, CHUNK)
        assert not plan.compiled and plan.graph_count == 0
        assert "_can_compile_fullgraph=False" in plan.eager_reason

        model = build_model("deepseek_v4").to("neuron")
        with graph_log.count_graphs() as graphs:
            generate_batches(model, workload_prompts(model.config.vocab_size, (20,)), 1, max_new_tokens=3)
        assert graphs.count == 0


def _big_llama_config(tmp_path):
    """~9 B parameters in float32 (about 34 GiB): more than one NeuronCore holds, a quarter of it fits."""
    config = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 8,
              "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256, "dtype": "float32"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_cli_says_whether_the_model_fits(tmp_path, capsys, fresh_dynamo):
    config = _big_llama_config(tmp_path)
    assert main(["plan", str(config), "--max-cache-len", "1024", "--json"]) == 1
    single = json.loads(capsys.readouterr().out)
    assert single["memory"]["fits"] is False and single["graph_count"] == 3  # buckets 64, 512 + decode
    assert single["memory"]["device_bytes"] == 24 << 30

    assert main(["plan", str(config), "--max-cache-len", "1024", "--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert "graphs per rank: 3" in out and ": fits" in out
    sharded = plan_generation(config, [1], 1024, tp=4)
    assert math.isclose(sharded.memory.weights, single["memory"]["weights"] / 4, rel_tol=0.05)

    assert main(["plan", str(config), "--instance", "trn3", "--json"]) == 0  # 36 GiB per core on trn3
    assert json.loads(capsys.readouterr().out)["memory"]["device_bytes"] == 36 << 30


@pytest.mark.parametrize("call, message", [
    (lambda p: plan_generation(p / "missing", [1]), "no such model folder"),
    (lambda p: plan_generation(p, [0]), "positive integer"),
    (lambda p: plan_generation(p, [1], 64, 64), "no room"),
    (lambda p: plan_generation(p, [1], tp=3), "does not divide by tp=3"),
    (lambda p: plan_training(p, packing=True, packing_strategy="greedy"), "packing_strategy"),
])
def test_bad_input_is_a_clear_error(tmp_path, call, message):
    folder = save_tiny_model("llama", tmp_path / "llama")
    with pytest.raises(PlanError, match=message):
        call(folder)


def test_routed_experts_are_sized_as_hf_neuron_shards_them():
    """Experts split over the TP group when its size divides them (hf_neuron's default on Neuron), whole on
    every rank when it does not; FSDP shards everything further."""
    from hf_neuron.transformers.plan import weight_bytes
    from hf_neuron.transformers.tensor_parallel.experts import is_expert_parameter

    with torch.device("meta"):
        model = build_model("qwen3_moe")  # 4 experts
    experts = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if is_expert_parameter(n))
    planned = any(".experts." in key for key in model._tp_plan)  # older releases' TP plans split each expert

    def expert_share(**layout):
        return weight_bytes(model, select=is_expert_parameter, buffers=False, **layout)

    assert expert_share(tp=1) == experts
    assert expert_share(tp=2) == experts / 2 == expert_share(tp=2, ep=2)
    # a user's ep_size=1 wins: the experts are split only where the release's TP plan names them
    assert expert_share(tp=2, ep=1) == (experts / 2 if planned else experts)
    if not planned:
        assert expert_share(tp=3) == experts  # 3 does not divide 4 experts: replicated
    assert expert_share(tp=2, fsdp=2, ep=4) == experts / 4
    assert expert_share(tp=2, fsdp=2) == experts / 4  # ep=2 over the TP group, FSDP over the other two ranks
    dense = weight_bytes(model, 1, buffers=False) - experts
    assert weight_bytes(model, 1, buffers=False, fsdp=2) == pytest.approx((dense + experts) / 2, abs=64)
