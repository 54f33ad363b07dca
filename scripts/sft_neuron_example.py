#!/usr/bin/env python
"""Supervised fine-tuning with TRL's SFTTrainer on AWS Trainium (device "neuron"), TP x FSDP.

The model is sharded as its weights load: ``DistributedConfig(tp_size, fsdp_size)`` goes to
``from_pretrained`` through ``SFTConfig.model_init_kwargs``; ``TP_SIZE * FSDP_SIZE`` must equal the
number of processes. The saved model is a standard Transformers checkpoint that runs on any hardware.

    TP_SIZE=4 FSDP_SIZE=8 torchrun --nproc_per_node=32 scripts/sft_neuron_example.py \\
        --model_name_or_path Qwen/Qwen3-8B --dataset_name HuggingFaceH4/ultrachat_200k \\
        --dataset_train_split train_sft --dtype bfloat16 --bf16 true --max_length 2048 \\
        --packing true --packing_strategy wrapped --per_device_train_batch_size 4 \\
        --gradient_accumulation_steps 4 --save_only_model true --torch_compile true \\
        --output_dir qwen3-8b-sft

``--model_name_or_path`` takes a Hub id or a local model directory; ``--dataset_name`` a Hub id, a
local dataset folder, or a single data file (``.json``/``.jsonl``/``.parquet``/...). Each row needs a
``messages`` column (a list of ``{"role", "content"}``); the other columns are dropped.
Without TP_SIZE/FSDP_SIZE, all processes do FSDP (TP_SIZE=1, FSDP_SIZE=WORLD_SIZE).

Neuron compiles one graph per input shape; hf_neuron's adapters keep the shapes few without any line
here: packed batches all have ``max_length`` tokens, unpacked ones a multiple of 128, and the last,
smaller batch of an epoch is padded to the full batch with rows that train nothing. The final model
is written to a staging folder inside ``--output_dir`` and moved in once complete.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from datasets import load_dataset
from transformers import AutoConfig, DistributedConfig
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser, get_peft_config

MESSAGES_COLUMN = "messages"


class ConfigurationError(ValueError):
    """Bad input found before training starts (nothing written yet): the message says what to change."""


def parallel_layout() -> tuple[int, int, int]:
    """(tp_size, fsdp_size, world_size) from the TP_SIZE / FSDP_SIZE / WORLD_SIZE environment."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        tp_size = int(os.environ.get("TP_SIZE", "1"))
        fsdp_size = int(os.environ.get("FSDP_SIZE", str(max(world_size // tp_size, 1))))
    except ValueError as exc:
        raise ConfigurationError(f"TP_SIZE and FSDP_SIZE must be integers ({exc}).") from None
    if tp_size < 1 or fsdp_size < 1:
        raise ConfigurationError(f"TP_SIZE ({tp_size}) and FSDP_SIZE ({fsdp_size}) must be >= 1.")
    if tp_size * fsdp_size != world_size:
        raise ConfigurationError(
            f"TP_SIZE * FSDP_SIZE = {tp_size} * {fsdp_size} = {tp_size * fsdp_size}, but {world_size} "
            f"process(es) were started (WORLD_SIZE). Launch with `torchrun --nproc_per_node={tp_size * fsdp_size}` "
            f"or change TP_SIZE/FSDP_SIZE so that their product is {world_size}."
        )
    return tp_size, fsdp_size, world_size


def check_model_fits_tp(model_name_or_path: str, tp_size: int, trust_remote_code: bool) -> None:
    """Tensor parallelism splits attention by heads: every head count must divide by TP_SIZE."""
    if tp_size == 1:
        return
    config = AutoConfig.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
    config = getattr(config, "get_text_config", lambda: config)()
    counts = {
        "num_attention_heads": getattr(config, "num_attention_heads", None),
        "num_key_value_heads": getattr(config, "num_key_value_heads", None),
    }
    bad = {name: n for name, n in counts.items() if n is not None and n % tp_size}
    if bad:
        detail = ", ".join(f"{name}={n}" for name, n in bad.items())
        divisors = [d for d in range(1, max(counts.values(), default=1) + 1) if all(
            n is None or n % d == 0 for n in counts.values())]
        raise ConfigurationError(
            f"TP_SIZE={tp_size} does not divide the model's {detail} ({model_name_or_path}). "
            f"Use a TP_SIZE among {divisors} and put the remaining processes in FSDP_SIZE."
        )


def load_chat_dataset(script_args: ScriptArguments):
    """Load the training split through `datasets.load_dataset`, keeping only the `messages` column."""
    name = script_args.dataset_name
    if name is None:
        raise ConfigurationError("--dataset_name is required (a Hub id, a local folder, or a data file).")
    path = Path(name)
    if path.is_file():
        # A single local file: `load_dataset` takes files through the builder of their format.
        from datasets.packaged_modules import _EXTENSION_TO_MODULE

        suffix = path.suffix.lstrip(".")
        if suffix == "jsonl":
            suffix = "json"
        builder = _EXTENSION_TO_MODULE.get("." + suffix, (suffix, {}))[0]
        dataset = load_dataset(builder, data_files={script_args.dataset_train_split: str(path)})
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, streaming=script_args.dataset_streaming)
    split = script_args.dataset_train_split
    if split not in dataset:
        raise ConfigurationError(
            f"dataset {name!r} has no split {split!r} (it has {sorted(dataset)}); pass --dataset_train_split."
        )
    train = dataset[split]
    columns = train.column_names or []
    if MESSAGES_COLUMN not in columns:
        raise ConfigurationError(
            f"dataset {name!r} (split {split!r}) has no {MESSAGES_COLUMN!r} column (it has {columns}). "
            f"Each row needs {MESSAGES_COLUMN!r}: a list of {{'role': ..., 'content': ...}} turns."
        )
    return train.select_columns([MESSAGES_COLUMN])


WEIGHT_FILE_PREFIXES = ("model.safetensors", "model-", "pytorch_model", "adapter_model")
STAGING_DIR = "tmp-final-model"


def save_model_atomically(trainer: SFTTrainer, output_dir: str) -> None:
    """Save the final model into a staging folder inside `output_dir`, then move it in.

    The long part (gathering and writing the weights) happens in the staging folder: a run stopped
    there leaves the model `output_dir` held before untouched. Moving the finished files in is one
    rename per file.
    """
    staging = os.path.join(output_dir, STAGING_DIR)
    if trainer.args.should_save:
        shutil.rmtree(staging, ignore_errors=True)  # left by an earlier interrupted save
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(staging)
    trainer.accelerator.wait_for_everyone()
    if trainer.args.should_save:
        new_files = sorted(os.listdir(staging), key=lambda name: name == "config.json")  # config last
        for name in new_files:
            os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
        for name in os.listdir(output_dir):  # weight shards of an older, differently sharded save
            path = os.path.join(output_dir, name)
            if name not in new_files and name.startswith(WEIGHT_FILE_PREFIXES) and os.path.isfile(path):
                os.remove(path)
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, SFTConfig, ModelConfig]:
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    return parser.parse_args_and_config(args=argv)


def build_trainer(argv: list[str] | None = None, callbacks=None) -> tuple[SFTTrainer, str]:
    """Parse the arguments, check them, and build the SFTTrainer (nothing is written before)."""
    script_args, training_args, model_args = parse_args(argv)

    tp_size, fsdp_size, world_size = parallel_layout()
    if model_args.model_name_or_path is None:
        raise ConfigurationError("--model_name_or_path is required (a Hub id or a local model directory).")
    check_model_fits_tp(model_args.model_name_or_path, tp_size, training_args.trust_remote_code)
    train_dataset = load_chat_dataset(script_args)

    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    if world_size > 1:
        model_init_kwargs["distributed_config"] = DistributedConfig(tp_size=tp_size, fsdp_size=fsdp_size)
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs

    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_dataset,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
    )
    return trainer, training_args.output_dir


def main(argv: list[str] | None = None, callbacks=None) -> SFTTrainer:
    trainer, output_dir = build_trainer(argv, callbacks)
    trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)
    save_model_atomically(trainer, output_dir)
    trainer.accelerator.print(f"Model saved to {output_dir}.")
    return trainer


if __name__ == "__main__":
    try:
        trainer = main(sys.argv[1:])
    except ConfigurationError as exc:
        sys.exit(f"error: {exc}")
    trainer.end()  # finish the trackers, destroy the process group
