"""Shared by the TRL tests: the example script, a tiny chat dataset, runs of the script."""

from __future__ import annotations

import contextvars
import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

from hf_neuron.testing import user_scripts

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "sft_neuron_example.py"
# The announcement's SFT script, byte for byte as users copy it.
USER_RECIPE = REPO / "scripts" / "recipes" / "sft_neuron_example.py"
WORKER = Path(__file__).with_name("trl_sft_worker.py")

# The announcement's SFT recipe scaled down: packing wrapped, torch_compile, bf16; the same global batch of 4
# sequences in every layout. max_length 192 is not a multiple of 128: full packs would pad to 256
# and the remainder packs to 128 without `trl.pad_packed_to_max_length`.
GLOBAL_BATCH = 4
RECIPE = dict(max_length=192, max_steps=3)
# The recipe's flags at tiny scale for whole runs: 2 epochs, per-device batch 2, gradient accumulation 2
# (so the last optimizer step of an epoch also has fewer micro-batches), no max_steps.
TWO_EPOCHS = dict(
    max_length=128, max_steps=-1, num_train_epochs=2, per_device_train_batch_size=2, gradient_accumulation_steps=2,
    learning_rate="1e-3",
)
# Neuron runs against CPU runs (or other layouts) of the same data, in bf16 (8 mantissa bits: a loss
# near 6 is resolved to about 0.02). Measured: equal to the last bit on the newest releases, deltas up
# to 1.6e-3 on the oldest supported ones (other kernel choices); a model that learned nothing differs
# by more than 0.1 after one step at this learning rate.
LOSS_TOLERANCE = 5e-3
LAYOUTS = {  # name: (processes, TP_SIZE, FSDP_SIZE)
    "single": (1, 1, 1),
    "tp2": (2, 2, 1),
    "fsdp2": (2, 1, 2),
    "tp2_fsdp2": (4, 2, 2),
}


WORDS = (
    "the quick brown fox jumps over a lazy dog while neuron cores compile static graphs for every shape "
    "of batch and sequence that the trainer feeds them during supervised fine tuning"
).split()


def load_script(isolated: bool = True):
    """``scripts/sft_neuron_example.py`` as a module (it is a script, not part of the package).

    ``isolated``: run its top level in a copy of the current context, so that the Dynamo setting it
    makes (``automatic_dynamic_shapes = False``, a context variable) does not leak into other tests.
    """
    spec = importlib.util.spec_from_file_location("sft_neuron_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    if isolated:
        contextvars.copy_context().run(spec.loader.exec_module, module)
    else:
        spec.loader.exec_module(module)
    return module


def chat_rows(n: int, seed: int = 0, min_words: int = 3, max_words: int = 40) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        user = " ".join(rng.choices(WORDS, k=rng.randint(min_words, max_words)))
        assistant = " ".join(rng.choices(WORDS, k=rng.randint(min_words, max_words)))
        rows.append(
            {
                "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
                "source": f"row-{i}",  # an extra column the script must drop
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_args(model_dir, dataset, output_dir, **overrides) -> list[str]:
    """The announcement's SFT recipe flags, scaled down to a tiny model."""
    args = {
        "model_name_or_path": str(model_dir),
        "dataset_name": str(dataset),
        "output_dir": str(output_dir),
        "dtype": "bfloat16",
        "bf16": "true",
        "max_length": "128",
        "packing": "true",
        "packing_strategy": "wrapped",
        "per_device_train_batch_size": "2",
        "gradient_accumulation_steps": "1",
        "max_steps": "3",
        "learning_rate": "1e-3",
        "lr_scheduler_type": "constant",
        "logging_steps": "1",
        "save_only_model": "true",
        "save_strategy": "no",
        "torch_compile": "true",
        "report_to": "none",
        "seed": "0",
        "dataloader_num_workers": "0",
        "disable_tqdm": "true",
    }
    args.update({k: str(v) for k, v in overrides.items()})
    argv = []
    for key, value in args.items():
        argv += [f"--{key}", value]
    return argv


def user_script_without_static_shapes(folder: Path) -> Path:
    return user_scripts.without_static_shapes(USER_RECIPE, folder)


def user_script_with_evaluation(folder: Path) -> Path:
    return user_scripts.with_evaluation(USER_RECIPE, folder)


def _worker_env(result_dir: Path, env: dict | None) -> dict:
    full_env = dict(os.environ)
    full_env.update(
        {
            "HF_NEURON_SIMULATOR": "1",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
            "HF_NEURON_GRAPH_LOG": str(result_dir / "graphs.jsonl"),
            "TRL_SFT_RESULT_DIR": str(result_dir),
        }
    )
    full_env.update(env or {})
    return full_env


def run_worker(nproc: int, argv: list[str], result_dir: Path, env: dict | None = None, timeout: int = 900):
    """Run the worker (the example script plus a recorder) in ``nproc`` processes; return its results."""
    result_dir.mkdir(parents=True, exist_ok=True)
    full_env = _worker_env(result_dir, env)
    if nproc == 1:
        command = [sys.executable, str(WORKER), *argv]
    else:
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            f"--master_port={free_port()}", str(WORKER), *argv,
        ]
    proc = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=timeout)
    (result_dir / "stdout.txt").write_text(proc.stdout)
    (result_dir / "stderr.txt").write_text(proc.stderr)
    return proc


def run_worker_on_two_nodes(
    nproc_per_node: int, argv: list[str], result_dir: Path, env: dict | None = None, timeout: int = 900
) -> list[subprocess.CompletedProcess]:
    """Run the worker as two torchrun launchers on the loopback address, as two hosts would run it
    (``--nnodes=2 --node_rank=0|1 --master_addr``); returns each launcher's outcome."""
    result_dir.mkdir(parents=True, exist_ok=True)
    full_env = _worker_env(result_dir, env)
    port = free_port()
    launchers = []
    for node_rank in range(2):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node_rank}",
            f"--nproc_per_node={nproc_per_node}", "--master_addr=127.0.0.1", f"--master_port={port}",
            str(WORKER), *argv,
        ]
        launchers.append(
            subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outcomes = []
    for node_rank, launcher in enumerate(launchers):
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in launchers:
                other.kill()
            raise
        (result_dir / f"node{node_rank}-stderr.txt").write_text(stderr)
        outcomes.append(subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr))
    return outcomes


def read_results(result_dir: Path) -> dict[int, dict]:
    results = {}
    for path in sorted(result_dir.glob("rank*.json")):
        data = json.loads(path.read_text())
        results[data["rank"]] = data
    return results


# --- checkpoint checks ----------------------------------------------------------------------------

ALLOWED_FILES = {
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "training_args.bin", "README.md", "adapter_config.json", "adapter_model.safetensors",
}
# TRL turns the cache off to train, and a mixture of experts' router logits on (its load-balancing loss)
VOLATILE_CONFIG_KEYS = {"transformers_version", "dtype", "torch_dtype", "use_cache", "output_router_logits"}


def check_standard_checkpoint(out_dir: Path, reference: dict, original_dir: Path) -> None:
    """`out_dir` is a plain Transformers checkpoint equal to `reference` (the full weights at save time)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    files = {p.name for p in out_dir.iterdir() if p.is_file()}
    assert files <= ALLOWED_FILES | {f for f in files if f.startswith("model-") and f.endswith(".safetensors")}, files

    config = json.loads((out_dir / "config.json").read_text())
    original = json.loads((Path(original_dir) / "config.json").read_text())
    for key in set(config) | set(original):
        assert "neuron" not in key.lower() and "distributed" not in key.lower(), key
        if key not in VOLATILE_CONFIG_KEYS:
            assert config.get(key) == original.get(key), (key, config.get(key), original.get(key))
    assert "neuron" not in json.dumps(config).lower()

    with safe_open(out_dir / "model.safetensors", framework="pt") as saved, safe_open(
        Path(original_dir) / "model.safetensors", framework="pt"
    ) as initial:
        assert set(saved.keys()) == set(initial.keys())
        for name in saved.keys():
            assert saved.get_slice(name).get_shape() == initial.get_slice(name).get_shape(), name
        assert (saved.metadata() or {}).get("format") == "pt"

    model, info = AutoModelForCausalLM.from_pretrained(out_dir, device_map="cpu", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    state = model.state_dict()
    assert set(state) == set(reference), set(state) ^ set(reference)
    for name, tensor in reference.items():
        loaded = state[name]
        assert type(loaded) is torch.Tensor and loaded.device.type == "cpu", name
        assert loaded.dtype == tensor.dtype and torch.equal(loaded, tensor), name
