"""DPO and GRPO on the simulated Neuron device with a tiny Qwen3, compiled, TRL's defaults.

DPO: batches of chosen/rejected pairs keep 128-multiple lengths; a pair-averaged loss cannot take
filler pairs, so the last, smaller batch of an epoch keeps its size: at most two batch shapes, all
compiled in the first epoch, and the losses of the same run on CPU. GRPO: the in-loop generation
compiles (prefill and decode: two graphs for the batch) and the whole run compiles at its first step.
"""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from hf_neuron.patching import upstream_behaviour
from hf_neuron.testing.training_graphs import GraphsDuringTraining
from trl_sft_helpers import WORDS

pytestmark = [pytest.mark.slow]


def _text(rng, low, high):
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))


@pytest.fixture(scope="module")
def preference_file(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("preference") / "pairs.jsonl"
    with open(path, "w") as f:
        for _ in range(5):  # batches of 2 pairs: the last batch of an epoch has one
            f.write(json.dumps({
                "prompt": [{"role": "user", "content": _text(rng, 3, 20)}],
                "chosen": [{"role": "assistant", "content": _text(rng, 3, 20)}],
                "rejected": [{"role": "assistant", "content": _text(rng, 3, 20)}],
            }) + "\n")
    return path


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    rng = random.Random(1)
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    with open(path, "w") as f:
        for _ in range(6):
            f.write(json.dumps({"prompt": [{"role": "user", "content": _text(rng, 3, 30)}]}) + "\n")
    return path


@pytest.fixture
def fresh_graphs():
    from hf_neuron.simulator import graph_log

    torch._dynamo.reset()
    graph_log.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        yield
    torch._dynamo.reset()


def _dpo_run(tiny_model_dir, preference_file, output_dir, on_cpu: bool):
    from datasets import load_dataset
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(
        output_dir=str(output_dir), max_length=128, per_device_train_batch_size=2, num_train_epochs=2,
        learning_rate=1e-3, bf16=True, torch_compile=not on_cpu, use_cpu=on_cpu, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
    )
    shapes = []
    callback = GraphsDuringTraining()

    class Recording(DPOTrainer):
        def training_step(self, model, inputs, *a, **k):
            shapes.append(tuple(inputs["input_ids"].shape))
            return super().training_step(model, inputs, *a, **k)

    trainer = Recording(
        model=str(tiny_model_dir), args=args, train_dataset=load_dataset("json", data_files=str(preference_file))["train"],
        callbacks=[callback],
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, shapes, callback, trainer.args.device.type


def test_dpo_two_epochs_bounded_shapes_and_cpu_losses(tiny_model_dir, preference_file, tmp_path, fresh_graphs):
    losses, shapes, graphs, device = _dpo_run(tiny_model_dir, preference_file, tmp_path / "neuron", on_cpu=False)
    assert device == "neuron"
    assert set(shapes) == {(4, 128), (2, 128)}, "full batches, and the epoch's last pair"
    assert graphs.after_epoch[0] > 0 and graphs.after_epoch[1] == graphs.after_epoch[0], graphs.after_epoch

    cpu_losses, cpu_shapes, _, cpu_device = _dpo_run(tiny_model_dir, preference_file, tmp_path / "cpu", on_cpu=True)
    assert cpu_device == "cpu" and len(cpu_losses) == len(losses)
    assert all(math.isfinite(x) for x in losses)
    assert max(abs(a - b) for a, b in zip(losses, cpu_losses)) < 1e-3, (losses, cpu_losses)


def test_grpo_generation_compiles_once(tiny_model_dir, prompt_file, tmp_path, fresh_graphs):
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    from hf_neuron.simulator import graph_log

    def reward_length(completions, **kwargs):
        return [len(c[0]["content"]) / 100 for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_completion_length=16,
        num_train_epochs=1, learning_rate=1e-3, bf16=True, torch_compile=True, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
    )
    callback = GraphsDuringTraining()
    dataset = load_dataset("json", data_files=str(prompt_file))["train"]
    with upstream_behaviour("trl.compiled_generation_on_neuron"):
        upstream = GRPOTrainer(model=str(tiny_model_dir), reward_funcs=reward_length, args=args, train_dataset=dataset)
    assert upstream.generation_config.disable_compile is True, "TRL generates eagerly"
    trainer = GRPOTrainer(
        model=str(tiny_model_dir), reward_funcs=reward_length, args=args, train_dataset=dataset, callbacks=[callback],
    )
    assert trainer.generation_config.disable_compile is False, "generation compiles on Neuron"
    trainer.train()
    records = graph_log.records()
    generation = [r for r in records if not r.get("backward") and [s for s, _ in r["inputs"]][0] in ([4, 1], )]
    assert len(callback.after_step) == 6
    assert callback.after_step == [callback.after_step[0]] * 6, callback.after_step
    # decode graphs: one for the batch of 4 completions (prefill: one more, per chunk shape)
    assert len(generation) == 1, [r["inputs"][0] for r in records]
    assert callback.after_step[0] <= 6, [r["inputs"][0] for r in records]
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)


def _smoke_data(kind, rng):
    prompt = [{"role": "user", "content": _text(rng, 3, 20)}]
    answer = [{"role": "assistant", "content": _text(rng, 3, 20)}]
    other = [{"role": "assistant", "content": _text(rng, 3, 20)}]
    if kind == "kto":
        return {"prompt": prompt, "completion": answer, "label": rng.random() < 0.5}
    if kind == "reward":
        return {"chosen": prompt + answer, "rejected": prompt + other}
    return {"prompt": prompt}


@pytest.mark.parametrize("kind", ["rloo", "kto", "reward"])
def test_other_trainers_train_compiled_with_bounded_graphs(kind, tiny_model_dir, tmp_path, fresh_graphs):
    """Smoke: RLOO (online, like GRPO), KTO and Reward train a few compiled steps on neuron, their batches
    padded to 128-multiples, and compile nothing after the first epoch of a two-epoch run."""
    import trl
    from datasets import Dataset

    rng = random.Random(2)
    rows = [_smoke_data(kind, rng) for _ in range(8)]
    common = dict(
        output_dir=str(tmp_path), learning_rate=1e-3, bf16=True, torch_compile=True, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0, num_train_epochs=2,
    )
    callback = GraphsDuringTraining()
    if kind == "rloo":
        args = trl.RLOOConfig(per_device_train_batch_size=4, num_generations=4, max_completion_length=16, **common)
        trainer = trl.RLOOTrainer(
            model=str(tiny_model_dir), reward_funcs=lambda completions, **kw: [len(c[0]["content"]) / 100
                                                                                for c in completions],
            args=args, train_dataset=Dataset.from_list(rows[:2]), callbacks=[callback],
        )
        assert trainer.generation_config.disable_compile is False
    elif kind == "kto":
        args = trl.KTOConfig(per_device_train_batch_size=4, max_length=128, **common)
        trainer = trl.KTOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                                 callbacks=[callback])
    else:
        args = trl.RewardConfig(per_device_train_batch_size=4, max_length=128, **common)
        trainer = trl.RewardTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                                    callbacks=[callback])
    assert args.pad_to_multiple_of == 128
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(math.isfinite(x) for x in losses)
    assert len(callback.after_epoch) == 2 and callback.after_epoch[1] == callback.after_epoch[0], callback.after_epoch
