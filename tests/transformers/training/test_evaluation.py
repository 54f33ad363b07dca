"""Evaluation after compiled training on neuron runs the compiled model: its graphs are compiled at the
first evaluation and reused by the next; upstream (the fix off) evaluates eagerly."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from hf_neuron.graphs import count_graphs
from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers.training.evaluation import FIX_NAME

LENGTH = 16


def _examples(n, seed):
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(3, 100, (LENGTH,), generator=g) for _ in range(n)]
    return [{"input_ids": x, "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": x.clone()} for x in ids]


def _graphs_per_evaluation(tiny_llama_dir, tmp_path) -> tuple[list[int], list[float]]:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=2,
        torch_compile=True, report_to="none", save_strategy="no", disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_examples(4, 0), eval_dataset=_examples(4, 1))
    trainer.train()
    graphs, losses = [], []
    for _ in range(2):
        with count_graphs() as compiled:
            losses.append(trainer.evaluate()["eval_loss"])
        graphs.append(compiled.count)
    return graphs, losses


@pytest.mark.slow
def test_evaluations_reuse_one_compiled_graph_set(tiny_llama_dir, tmp_path, fresh_dynamo, static_shapes):
    graphs, losses = _graphs_per_evaluation(tiny_llama_dir, tmp_path / "fixed")
    assert graphs[0] > 0 and graphs[1] == 0, graphs
    assert losses[0] == losses[1]

    torch._dynamo.reset()
    with upstream_behaviour(FIX_NAME):
        eager_graphs, eager_losses = _graphs_per_evaluation(tiny_llama_dir, tmp_path / "upstream")
    assert eager_graphs == [0, 0], "upstream evaluates the uncompiled model"
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=1e-5, atol=1e-5)
