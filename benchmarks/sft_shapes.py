"""Batch shapes of SFT on Neuron: upstream-only vs with hf_neuron, packed and unpacked.

    HF_NEURON_SIMULATOR=1 python benchmarks/sft_shapes.py [--rows 96] [--max-length 192] [--batch 2]

Runs ``scripts/sft_neuron_example.py`` (``torch_compile``, bf16) for one epoch of a local chat dataset
on a tiny Qwen3, once per variant, each in its own process, and prints from that one run: the distinct
batch shapes, the graphs the neuron backend compiled (each one is a neuronx-cc compile on Trainium,
minutes for a large model), and the padding overhead (pad tokens / all tokens). Variants:

- ``upstream only``: ``HF_NEURON_DISABLE=1`` (the installed TRL's own padding);
- ``upstream, TRL<1.16 padding``: the same with ``--pad_to_multiple_of none``, what TRL before 1.16
  does by default (pad to the longest sequence of the batch) and hf_neuron's backport replaces;
- ``with hf_neuron``: the adapters on.

Counts carry over to Trainium; the simulator's times do not, so none are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "sft_neuron_example.py"
WORDS = (
    "the quick brown fox jumps over a lazy dog while neuron cores compile static graphs for every shape "
    "of batch and sequence that the trainer feeds them during supervised fine tuning"
).split()


def write_dataset(path: Path, rows: int, max_words: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            turns = [" ".join(rng.choices(WORDS, k=rng.randint(2, max_words))) for _ in range(2)]
            messages = [{"role": "user", "content": turns[0]}, {"role": "assistant", "content": turns[1]}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return path


def child(argv: list[str]) -> None:
    """Run the example script in this process, recording batches and graphs; print one RESULT line."""
    import importlib.util

    from transformers import TrainerCallback
    from trl import SFTTrainer

    from hf_neuron.simulator import graph_log

    batches = []
    original = SFTTrainer.training_step

    def training_step(self, model, inputs, *args, **kwargs):
        ids, mask = inputs["input_ids"], inputs.get("attention_mask")
        real = int(mask.sum()) if mask is not None else ids.numel()
        batches.append((tuple(ids.shape), ids.numel() - real, ids.numel()))
        return original(self, model, inputs, *args, **kwargs)

    SFTTrainer.training_step = training_step

    class Graphs(TrainerCallback):
        def on_train_end(self, args, state, control, **kwargs):
            records = graph_log.records()
            self.result = {
                "graphs": len(records),
                "fallback": sum(r.get("status") != "compiled" for r in records),
                "pad_to_multiple_of": args.pad_to_multiple_of,
            }

    graphs = Graphs()
    spec = importlib.util.spec_from_file_location("sft_neuron_example", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(argv, callbacks=[graphs])
    result = dict(graphs.result)
    result.update(
        steps=len(batches),
        shapes=sorted({shape for shape, _, _ in batches}),
        pad_tokens=sum(p for _, p, _ in batches),
        tokens=sum(t for _, _, t in batches),
    )
    print("RESULT " + json.dumps(result))


def run_variant(model_dir, dataset, out, packed: bool, args, upstream: bool, old_padding: bool) -> dict:
    argv = [
        "--model_name_or_path", str(model_dir), "--dataset_name", str(dataset), "--output_dir", str(out),
        "--dtype", "bfloat16", "--bf16", "true", "--torch_compile", "true", "--max_length", str(args.max_length),
        "--packing", "true" if packed else "false", "--packing_strategy", "wrapped",
        "--per_device_train_batch_size", str(args.batch), "--num_train_epochs", "1",
        "--gradient_checkpointing", "false", "--save_strategy", "no", "--save_only_model", "true",
        "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1000", "--seed", "0",
    ]
    if old_padding:
        argv += ["--pad_to_multiple_of", "none"]
    env = dict(os.environ, HF_NEURON_SIMULATOR=os.environ.get("HF_NEURON_SIMULATOR", "1"),
               HF_NEURON_DISABLE="1" if upstream else "0", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("HF_NEURON_GRAPH_LOG", None)
    proc = subprocess.run([sys.executable, __file__, "--child", *argv], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"variant failed:\n{proc.stderr[-4000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=96, help="conversations in the dataset")
    parser.add_argument("--max-length", type=int, default=192, help="max_length (not a multiple of 128 by default)")
    parser.add_argument("--batch", type=int, default=2, help="per_device_train_batch_size")
    parser.add_argument("--max-words", type=int, default=60, help="longest turn, in words")
    args = parser.parse_args()

    from hf_neuron.testing.tiny_models import save_tiny_model

    work = Path(tempfile.mkdtemp(prefix="sft-shapes-"))
    model_dir = save_tiny_model("qwen3", work / "model")
    dataset = write_dataset(work / "chat.jsonl", args.rows, args.max_words)

    variants = [
        ("packed", True, "upstream only", True, False),
        ("packed", True, "with hf_neuron", False, False),
        ("unpacked", False, "upstream, TRL<1.16 padding", True, True),
        ("unpacked", False, "upstream only", True, False),
        ("unpacked", False, "with hf_neuron", False, False),
    ]
    rows = []
    for i, (kind, packed, label, upstream, old_padding) in enumerate(variants):
        result = run_variant(model_dir, dataset, work / f"out{i}", packed, args, upstream, old_padding)
        rows.append((kind, label, result))
        print(f"  ran {kind} / {label}", file=sys.stderr)

    bound = math.ceil(args.max_length / 128)
    print(f"\nSFT batch shapes, tiny Qwen3, {args.rows} conversations, max_length={args.max_length}, "
          f"batch={args.batch}, one epoch (last partial batch dropped), torch_compile on the simulated device")
    header = (
        f"{'data':9} {'variant':28} {'steps':>5} {'shapes':>6} {'graphs':>6} {'fallback':>8} {'pad overhead':>12}"
        "  pad_to  batch shapes"
    )
    print(header)
    print("-" * len(header))
    for kind, label, r in rows:
        overhead = r["pad_tokens"] / max(r["tokens"], 1)
        shapes = " ".join("x".join(map(str, s)) for s in r["shapes"])
        print(f"{kind:9} {label:28} {r['steps']:>5} {len(r['shapes']):>6} {r['graphs']:>6} {r['fallback']:>8} "
              f"{overhead:>11.1%}  {str(r['pad_to_multiple_of']):6}  {shapes}")
    print()
    for kind in ("packed", "unpacked"):
        ours = next(r for k, label, r in rows if k == kind and label == "with hf_neuron")
        for k, label, r in rows:
            if k != kind or label == "with hf_neuron":
                continue
            print(f"{kind}: graphs compiled, hf_neuron / {label}: {ours['graphs'] / max(r['graphs'], 1):.2f}x; "
                  f"distinct shapes {len(ours['shapes'])} vs {len(r['shapes'])}; padding overhead "
                  f"{ours['pad_tokens'] / max(ours['tokens'], 1):.1%} vs {r['pad_tokens'] / max(r['tokens'], 1):.1%}")
    ours = next(r for k, label, r in rows if k == "unpacked" and label == "with hf_neuron")
    print(f"unpacked bound: ceil(max_length / 128) = {bound} shapes; with hf_neuron: {len(ours['shapes'])}")


if __name__ == "__main__":
    main()
