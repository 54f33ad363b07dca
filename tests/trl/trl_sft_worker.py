"""Worker for the TRL tests: runs ``scripts/sft_neuron_example.py`` or a user's script unchanged, plus a recorder.

``$TRL_SFT_USER_SCRIPT``, when set, is a script with the announcement recipe's structure (a
``main(script_args, training_args, model_args)`` run under ``if __name__ == "__main__"``); it is run
as its ``__main__`` block does, with the recorder attached to the trainer it creates.

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

from trl_sft_helpers import load_script  # noqa: E402

from hf_neuron.testing.training_graphs import GraphsDuringTraining  # noqa: E402

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
EVAL_BATCHES: list[dict] = []  # per evaluation batch


def _describe(inputs) -> dict:
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    real = int(mask.sum()) if mask is not None else ids.numel()
    labels = inputs.get("labels")
    ignored_rows = int((labels == -100).all(dim=-1).sum()) if labels is not None else 0
    return {
        "shape": list(ids.shape), "pad_tokens": ids.numel() - real, "tokens": ids.numel(), "ignored_rows": ignored_rows,
    }


def record_batches() -> None:
    """Record the shape and the padding of every batch the SFT trainer trains and evaluates on."""
    from trl import SFTTrainer

    original_training_step = SFTTrainer.training_step
    original_prediction_step = SFTTrainer.prediction_step

    def training_step(self, model, inputs, *args, **kwargs):
        BATCHES.append(_describe(inputs))
        return original_training_step(self, model, inputs, *args, **kwargs)

    def prediction_step(self, model, inputs, *args, **kwargs):
        EVAL_BATCHES.append(_describe(inputs))
        return original_prediction_step(self, model, inputs, *args, **kwargs)

    SFTTrainer.training_step = training_step
    SFTTrainer.prediction_step = prediction_step


class Recorder(GraphsDuringTraining):
    def on_train_end(self, args, state, control, model=None, **kwargs):
        from hf_neuron.simulator import graph_log
        from hf_neuron.transformers.tensor_parallel.experts import expert_layout

        full = _full_state_dict(model)
        trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
        if _rank() == 0:
            torch.save(full, RESULT_DIR / "reference.pt")
        records = graph_log.records()
        result = {
            "rank": _rank(),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "losses": [entry["loss"] for entry in state.log_history if "loss" in entry],
            "graphs_after_step": self.after_step,
            "graphs_after_epoch": self.after_epoch,
            "graphs_after_evaluation": self.after_evaluation,
            "eval_losses": [entry["eval_loss"] for entry in state.log_history if "eval_loss" in entry],
            "epochs": [entry.get("epoch") for entry in state.log_history if "loss" in entry],
            "batches": BATCHES,
            "eval_batches": EVAL_BATCHES,
            "graph_inputs": [[shape for shape, _ in r.get("inputs", [])] for r in records],
            "graph_status": [r.get("status") for r in records],
            "trainable": trainable,
            "device": str(next(model.parameters()).device),
            "dynamic_shapes": torch._dynamo.config.automatic_dynamic_shapes,
            "pad_to_multiple_of": args.pad_to_multiple_of,
            "experts": expert_layout(model),
        }
        (RESULT_DIR / f"rank{_rank()}.json").write_text(json.dumps(result))


def run_user_script(path: str) -> None:
    import importlib.util

    from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

    original_train = SFTTrainer.train

    def train(self, *args, **kwargs):
        self.add_callback(Recorder())
        return original_train(self, *args, **kwargs)

    SFTTrainer.train = train
    spec = importlib.util.spec_from_file_location("user_sft_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    module.main(*parser.parse_args_and_config())


if __name__ == "__main__":
    record_batches()
    if os.environ.get("TRL_SFT_USER_SCRIPT"):
        run_user_script(os.environ["TRL_SFT_USER_SCRIPT"])
    else:
        script = load_script(isolated=False)
        trainer = script.main(sys.argv[1:], callbacks=[Recorder()])
        trainer.end()
