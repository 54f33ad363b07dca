"""Worker for the TRL tests: runs ``scripts/sft_neuron_example.py`` unchanged, plus a recorder.

The recorder writes ``rank<R>.json`` into ``$TRL_SFT_RESULT_DIR``: the logged losses, the graphs this
process compiled after each step, and (rank 0) the full weights the model held when training ended
(``reference.pt``, gathered here with ``DTensor.full_tensor`` independently of the save path).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from trl_sft_helpers import load_script  # noqa: E402

RESULT_DIR = Path(os.environ["TRL_SFT_RESULT_DIR"])


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _full_state_dict(model) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    full = {}
    for name, tensor in sorted(model.state_dict().items()):  # same order on every rank: collectives
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        full[name] = tensor.detach().to("cpu", copy=True)
    return full


BATCHES: list[dict] = []  # per training micro-batch: shape and padding


def record_batches() -> None:
    """Record the shape and the pad tokens of every batch the SFT trainer trains on."""
    from trl import SFTTrainer

    original = SFTTrainer.training_step

    def training_step(self, model, inputs, *args, **kwargs):
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask")
        real = int(mask.sum()) if mask is not None else ids.numel()
        BATCHES.append({"shape": list(ids.shape), "pad_tokens": ids.numel() - real, "tokens": ids.numel()})
        return original(self, model, inputs, *args, **kwargs)

    SFTTrainer.training_step = training_step


class Recorder(TrainerCallback):
    def __init__(self):
        self.graphs_after_step: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        from hf_neuron.simulator import graph_log

        self.graphs_after_step.append(graph_log.graph_count())

    def on_train_end(self, args, state, control, model=None, **kwargs):
        from hf_neuron.simulator import graph_log

        full = _full_state_dict(model)
        trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
        if _rank() == 0:
            torch.save(full, RESULT_DIR / "reference.pt")
        records = graph_log.records()
        result = {
            "rank": _rank(),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "losses": [entry["loss"] for entry in state.log_history if "loss" in entry],
            "graphs_after_step": self.graphs_after_step,
            "batches": BATCHES,
            "graph_inputs": [[shape for shape, _ in r.get("inputs", [])] for r in records],
            "graph_status": [r.get("status") for r in records],
            "trainable": trainable,
            "device": str(next(model.parameters()).device),
            "dynamic_shapes": torch._dynamo.config.automatic_dynamic_shapes,
            "pad_to_multiple_of": args.pad_to_multiple_of,
        }
        (RESULT_DIR / f"rank{_rank()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    record_batches()
    script = load_script(isolated=False)
    trainer = script.main(sys.argv[1:], callbacks=[Recorder()])
    trainer.end()
