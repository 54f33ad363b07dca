"""Every training and evaluation batch of a Trainer on Neuron has the full batch size.

An epoch whose length is not a multiple of the batch size ends with a smaller batch (unless
``dataloader_drop_last=True``, which throws those examples away). On Neuron each new input shape is a
new graph compile (minutes on Trainium), at the end of every epoch and of every evaluation; with
automatic dynamic shapes on, it is even a symbolic-shape graph that the backend rejects.

The fix pads a short batch to the full batch size with rows that cannot change the result: copies of
a real row whose labels are the ignore index (-100) and whose attention and loss masks are zero. The
Trainer's loss is normalised by the number of labelled tokens, so the loss and the gradients equal
those of the short batch; TRL's token accuracy and entropy count labelled tokens only. (An MoE
router's auxiliary load-balancing loss does see the extra rows.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from hf_neuron.devices import trains_on_neuron
from hf_neuron.patching import fix, require_methods, wrap

logger = logging.getLogger("hf_neuron")

FIX_NAME = "trainer-full-last-batch"
IGNORE_INDEX = -100
DATALOADER_METHODS = ("get_train_dataloader", "get_eval_dataloader", "get_test_dataloader")


def _filler_rows(name: str, rows: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` rows that add nothing to the loss, shaped like ``rows`` (copies of its first row)."""
    filler = rows[:1].expand(count, *rows.shape[1:]).clone()
    if name == "labels" or name.endswith("_labels"):
        filler.fill_(IGNORE_INDEX)
    elif "mask" in name:
        filler.zero_()
    return filler


def pad_batch_rows(batch: Mapping[str, Any], rows: int, batch_size: int) -> Mapping[str, Any]:
    """``batch`` (``rows`` examples) with every per-example tensor extended to ``batch_size`` rows."""
    padded = dict(batch)
    for name, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == rows:
            padded[name] = torch.cat([value, _filler_rows(name, value, batch_size - rows)])
    if type(batch) is dict:
        return padded
    try:
        return type(batch)(padded)  # BatchEncoding and other mappings built from a dict
    except Exception:
        return padded


def _padding_free(batch: Mapping[str, Any]) -> bool:
    # Padding-free batches are one row of concatenated sequences: their shape does not follow the
    # number of examples.
    return "attention_mask" not in batch and ("position_ids" in batch or "cu_seq_lens_q" in batch)


class FullBatchCollator:
    """Collates with ``collator`` and pads a short batch (the last of an epoch) to ``batch_size`` rows."""

    def __init__(self, collator, batch_size: int):
        self.collator = collator
        self.batch_size = batch_size

    def __call__(self, examples):
        batch = self.collator(examples)
        rows = len(examples)
        if not 0 < rows < self.batch_size or not isinstance(batch, Mapping) or _padding_free(batch):
            return batch
        if "labels" not in batch:
            return batch  # no labels to ignore: the extra rows would count
        return pad_batch_rows(batch, rows, self.batch_size)


def _batch_size_of(dataloader) -> int | None:
    for source in (getattr(dataloader, "batch_sampler", None), dataloader):
        size = getattr(source, "batch_size", None)
        if isinstance(size, int) and size > 1:
            return size
    return None


def _torch_dataloader(dataloader):
    # Accelerate's prepared dataloaders wrap a torch DataLoader (``base_dataloader``), whose
    # ``collate_fn`` is the one used when iterating.
    while getattr(dataloader, "base_dataloader", None) is not None:
        dataloader = dataloader.base_dataloader
    return dataloader


def _full_batches_on_neuron(original, self, *args, **kwargs):
    dataloader = original(self, *args, **kwargs)
    if not trains_on_neuron(self.args):
        return dataloader
    loader = _torch_dataloader(dataloader)
    collate_fn = getattr(loader, "collate_fn", None)
    batch_size = _batch_size_of(loader)
    if collate_fn is not None and batch_size is not None and not isinstance(collate_fn, FullBatchCollator):
        loader.collate_fn = FullBatchCollator(collate_fn, batch_size)
    return dataloader


def _trainer_builds_dataloaders() -> bool:
    from transformers.trainer import Trainer

    require_methods(Trainer, DATALOADER_METHODS)
    # Whether a batch comes out short is seen batch by batch: a full batch is left as it is.
    return True


@fix(FIX_NAME, "transformers", _trainer_builds_dataloaders, waits_for="transformers.trainer")
def patch_trainer_dataloaders() -> None:
    """The last batch of an epoch (and of an evaluation) is smaller, a new graph compile on Neuron each
    time, or a dynamic-shape graph the backend rejects; ``dataloader_drop_last`` loses the examples.

    Patch: on Neuron, the Trainer's dataloaders pad a short batch to the full batch size with rows
    whose labels are ignored and masks zero, so loss and gradients are those of the real rows. Seen
    per batch: a batch upstream already delivers full is left alone.
    """
    from transformers.trainer import Trainer

    for name in DATALOADER_METHODS:
        wrap(FIX_NAME, Trainer, name, _full_batches_on_neuron)
