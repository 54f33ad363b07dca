"""A Trainer's dataloaders on neuron: every batch has the full batch size, the filler rows change
neither the loss nor the gradients, and upstream (the fix off) leaves the last batch short."""

from __future__ import annotations

import torch
from transformers import BatchEncoding, Trainer, TrainingArguments

from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers.training.batches import FIX_NAME, FullBatchCollator, pad_batch_rows

ROWS, LENGTH = 7, 16


def _examples(n=ROWS, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(3, 100, (LENGTH,), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones(LENGTH, dtype=torch.long), "labels": ids.clone()})
    return out


def _trainer(tmp_path, model=None):
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=3, report_to="none",
        remove_unused_columns=False,
    )
    model = model if model is not None else torch.nn.Linear(1, 1)
    return Trainer(model=model, args=args, train_dataset=_examples(), eval_dataset=_examples(seed=1))


def _shapes(dataloader):
    return [tuple(batch["input_ids"].shape) for batch in dataloader]


def test_every_batch_is_full_on_neuron(tmp_path):
    trainer = _trainer(tmp_path)
    assert trainer.args.device.type == "neuron"
    assert set(_shapes(trainer.get_train_dataloader())) == {(2, LENGTH)}  # 7 rows: 3 full batches + 1 padded
    assert set(_shapes(trainer.get_eval_dataloader())) == {(3, LENGTH)}  # 7 rows: 2 full + 1 padded
    last = list(trainer.get_eval_dataloader())[-1]
    assert (last["labels"][1:] == -100).all() and (last["attention_mask"][1:] == 0).all()
    assert (last["labels"][0] != -100).all()


def test_upstream_leaves_the_last_batch_short(tmp_path):
    with upstream_behaviour(FIX_NAME):
        trainer = _trainer(tmp_path)
        assert _shapes(trainer.get_train_dataloader())[-1] == (1, LENGTH)
        assert _shapes(trainer.get_eval_dataloader())[-1] == (1, LENGTH)


def test_filler_rows_change_neither_loss_nor_gradients(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    short = {k: torch.stack([e[k] for e in _examples(3)]) for k in ("input_ids", "attention_mask", "labels")}
    padded = pad_batch_rows(short, 3, 8)
    assert padded["input_ids"].shape == (8, LENGTH)

    def loss_and_grads(batch):
        model.zero_grad()
        # the Trainer's loss: summed over labelled tokens, divided by their count in the batch
        num_items = (batch["labels"][:, 1:] != -100).sum()
        loss = model(**batch, num_items_in_batch=num_items).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    expected_loss, expected_grads = loss_and_grads(short)
    loss, grads = loss_and_grads(padded)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_collator_keeps_the_batch_type_and_leaves_other_batches_alone():
    def collate(examples):
        return BatchEncoding({k: torch.stack([e[k] for e in examples]) for k in examples[0]})

    collator = FullBatchCollator(collate, batch_size=4)
    padded = collator(_examples(3))
    assert isinstance(padded, BatchEncoding) and padded["input_ids"].shape == (4, LENGTH)
    assert collator(_examples(4))["input_ids"].shape == (4, LENGTH)

    without_labels = FullBatchCollator(lambda ex: {"input_ids": torch.stack([e["input_ids"] for e in ex])}, 4)
    assert without_labels(_examples(3))["input_ids"].shape == (3, LENGTH), "no labels: extra rows would count"

    padding_free = FullBatchCollator(lambda ex: {"input_ids": torch.zeros(1, 40), "position_ids": torch.zeros(1, 40),
                                                 "labels": torch.zeros(1, 40)}, 4)
    assert padding_free(_examples(1))["input_ids"].shape == (1, 40), "padding-free batches are one row"


def test_the_users_drop_last_still_wins(tmp_path):
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, report_to="none", remove_unused_columns=False,
        dataloader_drop_last=True,
    )
    trainer = Trainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=_examples())
    assert _shapes(trainer.get_train_dataloader()) == [(2, LENGTH)] * 3
