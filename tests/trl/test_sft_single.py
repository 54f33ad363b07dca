"""The example script in one process on Neuron, as the announcement's SFT recipe runs it (packing wrapped,
torch_compile, bf16): it trains, compiles one graph set, saves a standard checkpoint; unpacked
batches stay within ceil(max_length / 128) shapes; PEFT LoRA trains and its adapter loads on CPU."""

from __future__ import annotations

import math
import random

import pytest
import torch

from trl_sft_helpers import LOSS_TOLERANCE, RECIPE, chat_rows, check_standard_checkpoint, write_jsonl

pytestmark = pytest.mark.slow


def test_trains_with_one_graph_set_and_saves_a_standard_checkpoint(sft_runs, tiny_model_dir):
    run = sft_runs("single")
    result = run["results"][0]
    assert result["device"] == "neuron:0"
    losses = result["losses"]
    assert len(losses) == RECIPE["max_steps"] and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]

    # packed batches padded to max_length: one batch shape, one graph set compiled at the first step
    assert result["pad_to_multiple_of"] == RECIPE["max_length"]
    assert {tuple(b["shape"]) for b in result["batches"]} == {(4, RECIPE["max_length"])}
    graphs = result["graphs_after_step"]
    assert graphs[0] > 0 and graphs == [graphs[0]] * len(graphs), graphs
    assert set(result["graph_status"]) == {"compiled"}
    assert result["dynamic_shapes"] is False

    check_standard_checkpoint(run["out"], torch.load(run["result_dir"] / "reference.pt"), tiny_model_dir)


@pytest.fixture(scope="module")
def long_chat_dataset(tmp_path_factory):
    rows = chat_rows(48, seed=1, min_words=2, max_words=70)
    random.Random(0).shuffle(rows)
    return write_jsonl(tmp_path_factory.mktemp("long-chat") / "chat.jsonl", rows)


def test_unpacked_batches_stay_within_the_128_buckets(sft_runs, long_chat_dataset):
    max_length = 320
    run = sft_runs(
        "unpacked", dataset=long_chat_dataset, packing="false", max_length=max_length, max_steps=8,
        per_device_train_batch_size=2,
    )
    result = run["results"][0]
    shapes = [tuple(b["shape"]) for b in result["batches"]]
    lengths = {length for _, length in shapes}
    assert all(length % 128 == 0 for length in lengths), lengths
    assert 1 < len(lengths) <= math.ceil(max_length / 128), lengths

    # a graph set per distinct shape, compiled the first time the shape is seen and never again
    graphs = result["graphs_after_step"]
    per_set = graphs[0]
    seen = []
    for step, shape in enumerate(shapes):
        if shape not in seen:
            seen.append(shape)
        assert graphs[step] == per_set * len(seen), (step, shape, graphs)


LORA = dict(use_peft="true", lora_r=4, lora_alpha=8, lora_target_modules="all-linear", learning_rate="5e-3")


def test_peft_lora_trains_and_the_adapter_loads_on_cpu(sft_runs, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = sft_runs("peft", **LORA)
    result = run["results"][0]
    assert result["trainable"] and all(".lora_" in name for name in result["trainable"]), result["trainable"]
    cpu = sft_runs("peft-cpu", use_cpu="true", torch_compile="false", env={"HF_NEURON_SIMULATOR": "0"}, **LORA)
    cpu_losses = cpu["results"][0]["losses"]
    assert len(result["losses"]) == len(cpu_losses) == RECIPE["max_steps"]
    assert max(abs(a - b) for a, b in zip(result["losses"], cpu_losses)) < LOSS_TOLERANCE, (result["losses"], cpu_losses)

    reference = torch.load(run["result_dir"] / "reference.pt")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, device_map="cpu", dtype=torch.bfloat16)
    model = PeftModel.from_pretrained(base, run["out"])
    state = model.state_dict()
    lora = [name for name in reference if ".lora_" in name]
    assert lora and set(lora) == {name for name in state if ".lora_" in name}
    for name in lora:
        assert torch.equal(state[name].to(reference[name].dtype), reference[name]), name
    # LoRA B starts at zero: the adapter learned something
    assert any(reference[name].abs().sum() > 0 for name in lora if ".lora_B." in name)
