"""Batch shapes and graphs of SFT on Neuron: upstream (``HF_NEURON_DISABLE=1``) vs with hf_neuron.

    HF_NEURON_SIMULATOR=1 python benchmarks/sft_shapes.py [--rows 96] [--max-length 192] [--batch 2]

Runs the announcement's SFT recipe *unchanged* (``scripts/recipes/sft_neuron_example.py``:
``torch_compile``, bf16, TRL's defaults, so activation checkpointing on and the last, smaller batch of
each epoch kept) for two epochs of a local chat dataset on a tiny Qwen3, each variant in its own
process, and prints from that one run: the steps, the distinct batch shapes, the graphs the neuron
backend compiled (each one is a neuronx-cc compile on Trainium, minutes for a large model), those
compiled during the second epoch, and the padding overhead (pad tokens / all tokens). Rows:

- ``packed``, ``unpacked``: the recipe as published (packing wrapped, or ``--packing false``);
- ``eval``: the recipe with an evaluation split and ``eval_strategy="steps"`` (3+ evaluations): graphs
  compiled by the evaluations, and by the evaluations after the first;
- variants: ``upstream`` (``HF_NEURON_DISABLE=1``: upstream code only), ``upstream, no checkpointing``
  (the same with ``--gradient_checkpointing false``, since upstream's compiled checkpointing does not
  compile on Neuron), ``upstream, TRL<1.16 padding`` (``--pad_to_multiple_of none``), ``with hf_neuron``.

A variant that fails is printed with its error. Counts carry over to Trainium; the simulator's times do
not, so none are printed. The run ends with the rows of the table in ``docs/benchmarks.md`` (``--only "packed/with hf_neuron"``
runs just the named rows; ``tests/benchmarks`` checks that row against ``docs/benchmarks.md``).
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

from hf_neuron.testing.benchmark_tables import print_table_rows

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "scripts" / "recipes" / "sft_neuron_example.py"
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


def child(script: str, argv: list[str]) -> None:
    """Run a user script's ``main`` in this process, recording batches and graphs; print one RESULT line."""
    import importlib.util

    from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

    from hf_neuron.simulator import graph_log
    from hf_neuron.testing.training_graphs import GraphsDuringTraining

    batches = []
    original = SFTTrainer.training_step

    def training_step(self, model, inputs, *args, **kwargs):
        ids, mask = inputs["input_ids"], inputs.get("attention_mask")
        real = int(mask.sum()) if mask is not None else ids.numel()
        batches.append((tuple(ids.shape), ids.numel() - real, ids.numel()))
        return original(self, model, inputs, *args, **kwargs)

    graphs = GraphsDuringTraining()
    original_train = SFTTrainer.train

    def train(self, *args, **kwargs):
        self.add_callback(graphs)
        return original_train(self, *args, **kwargs)

    SFTTrainer.training_step = training_step
    SFTTrainer.train = train
    spec = importlib.util.spec_from_file_location("user_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    module.main(script_args, training_args, model_args)
    evaluations = graphs.by_evaluation
    result = {
        "graphs": graph_log.graph_count(),
        "second_epoch": graphs.after_epoch[-1] - graphs.after_epoch[0] if len(graphs.after_epoch) > 1 else None,
        "evaluation_graphs": evaluations[0] if evaluations else None,
        "later_evaluation_graphs": sum(evaluations[1:]) if evaluations else None,
        "evaluations": len(evaluations),
        "pad_to_multiple_of": training_args.pad_to_multiple_of,
        "steps": len(batches),
        "shapes": sorted({shape for shape, _, _ in batches}),
        "pad_tokens": sum(p for _, p, _ in batches),
        "tokens": sum(t for _, _, t in batches),
    }
    print("RESULT " + json.dumps(result))


def run_variant(script, model_dir, dataset, out, args, extra: list[str], upstream: bool) -> dict:
    argv = [
        "--model_name_or_path", str(model_dir), "--dataset_name", str(dataset), "--output_dir", str(out),
        "--dtype", "bfloat16", "--bf16", "true", "--torch_compile", "true", "--max_length", str(args.max_length),
        "--packing", "true", "--packing_strategy", "wrapped", "--per_device_train_batch_size", str(args.batch),
        "--num_train_epochs", "2", "--save_strategy", "no", "--save_only_model", "true",
        "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1000", "--seed", "0", *extra,
    ]
    env = dict(os.environ, HF_NEURON_SIMULATOR=os.environ.get("HF_NEURON_SIMULATOR", "1"),
               HF_NEURON_DISABLE="1" if upstream else "0", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("HF_NEURON_GRAPH_LOG", None)
    proc = subprocess.run([sys.executable, __file__, "--child", str(script), *argv], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if "Error" in line and not line.startswith(" ")]
        return {"error": (errors[-1] if errors else proc.stderr.strip().splitlines()[-1])[:160]}
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _shapes_cell(shapes: list) -> str:
    listed = ", ".join("x".join(map(str, shape)) for shape in shapes)
    return f"{len(shapes)} ({listed})" if len(shapes) <= 2 else str(len(shapes))


def _evaluation_cells(r: dict) -> tuple[str, str]:
    if r["evaluation_graphs"] is None:
        return "", ""
    if r["evaluation_graphs"] == 0:  # the first evaluation needs new graphs unless it runs uncompiled
        return "0 (eager)", f"{r['later_evaluation_graphs']} (eager)"
    return str(r["evaluation_graphs"]), str(r["later_evaluation_graphs"])


def readme_row(kind: str, label: str, r: dict) -> str:
    """One row of the table in ``docs/benchmarks.md``."""
    if "error" in r:
        error = r["error"].split(":")[0]  # the exception's name; the full text is in the table above
        return f"| {kind} | {label} | fails: `{error}` |  |  |  |  |  |  |"
    overhead = r["pad_tokens"] / max(r["tokens"], 1)
    cells = [kind, label, r["steps"], _shapes_cell(r["shapes"]), r["graphs"], r["second_epoch"],
             *_evaluation_cells(r), f"{overhead:.1%}"]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=96, help="conversations in the dataset")
    parser.add_argument("--max-length", type=int, default=192, help="max_length (not a multiple of 128 by default)")
    parser.add_argument("--batch", type=int, default=2, help="per_device_train_batch_size")
    parser.add_argument("--max-words", type=int, default=60, help="longest turn, in words")
    parser.add_argument("--only", default=None,
                        help='comma-separated "data/variant" rows to run, e.g. "packed/with hf_neuron" (default: all)')
    args = parser.parse_args()

    from hf_neuron.tiny_models import save_tiny_model
    from hf_neuron.testing.user_scripts import with_evaluation

    work = Path(tempfile.mkdtemp(prefix="sft-shapes-"))
    model_dir = save_tiny_model("qwen3", work / "model")
    data = work / "data"
    data.mkdir()
    write_dataset(data / "train.jsonl", args.rows, args.max_words)
    write_dataset(data / "test.jsonl", max(args.rows // 4, 5), args.max_words, seed=1)
    eval_script = with_evaluation(RECIPE, work)

    no_checkpointing = ["--gradient_checkpointing", "false"]
    unpacked = ["--packing", "false"]
    evaluation = ["--eval_strategy", "steps", "--eval_steps", str(max(args.rows // (4 * args.batch), 1)),
                  "--per_device_eval_batch_size", str(args.batch + 1), "--dataset_test_split", "test"]
    variants = [
        ("packed", "upstream", RECIPE, [], True),
        ("packed", "upstream, no checkpointing", RECIPE, no_checkpointing, True),
        ("packed", "with hf_neuron", RECIPE, [], False),
        ("unpacked", "upstream, TRL<1.16 padding", RECIPE, unpacked + no_checkpointing + ["--pad_to_multiple_of",
                                                                                          "none"], True),
        ("unpacked", "upstream, no checkpointing", RECIPE, unpacked + no_checkpointing, True),
        ("unpacked", "with hf_neuron", RECIPE, unpacked, False),
        ("eval", "upstream, no checkpointing", eval_script, evaluation + no_checkpointing, True),
        ("eval", "with hf_neuron", eval_script, evaluation, False),
    ]
    if args.only:
        wanted = {item.strip() for item in args.only.split(",")}
        unknown = wanted - {f"{kind}/{label}" for kind, label, *_ in variants}
        if unknown:
            parser.error(f"--only: no such row {sorted(unknown)}; rows: "
                         + ", ".join(f"{kind}/{label}" for kind, label, *_ in variants))
        variants = [v for v in variants if f"{v[0]}/{v[1]}" in wanted]
    rows = []
    for i, (kind, label, script, extra, upstream) in enumerate(variants):
        result = run_variant(script, model_dir, data, work / f"out{i}", args, extra, upstream)
        rows.append((kind, label, result))
        print(f"  ran {kind} / {label}", file=sys.stderr)

    print(f"\nSFT with the unchanged recipe, tiny Qwen3, {args.rows} conversations, max_length={args.max_length}, "
          f"batch={args.batch}, two epochs (last batch of each kept), torch_compile on the simulated device")
    header = (f"{'data':9} {'variant':28} {'steps':>5} {'shapes':>6} {'graphs':>6} {'epoch 2':>7} {'eval':>5} "
              f"{'eval 2+':>7} {'pad overhead':>12}  batch shapes")
    print(header)
    print("-" * len(header))
    for kind, label, r in rows:
        if "error" in r:
            print(f"{kind:9} {label:28} fails: {r['error']}")
            continue
        overhead = r["pad_tokens"] / max(r["tokens"], 1)
        shapes = " ".join("x".join(map(str, s)) for s in r["shapes"])
        evals = ("-", "-") if r["evaluation_graphs"] is None else (r["evaluation_graphs"], r["later_evaluation_graphs"])
        print(f"{kind:9} {label:28} {r['steps']:>5} {len(r['shapes']):>6} {r['graphs']:>6} {r['second_epoch']:>7} "
              f"{evals[0]:>5} {evals[1]:>7} {overhead:>11.1%}  {shapes}")
    print("\n(epoch 2: graphs compiled during the second epoch; eval: graphs compiled by the first evaluation;"
          " eval 2+: by the later ones)")
    for kind in ("packed", "unpacked", "eval"):
        ours = next((r for k, label, r in rows if k == kind and label == "with hf_neuron"), None)
        if ours is None:
            continue
        for k, label, r in rows:
            if k != kind or label == "with hf_neuron" or "error" in r or "error" in ours:
                continue
            print(f"{kind}: graphs compiled, hf_neuron / {label}: {ours['graphs'] / max(r['graphs'], 1):.2f}x; "
                  f"distinct shapes {len(ours['shapes'])} vs {len(r['shapes'])}")
    ours = next((r for k, label, r in rows if k == "unpacked" and label == "with hf_neuron"), None)
    if ours is not None and "error" not in ours:
        print(f"unpacked bound: ceil(max_length / 128) = {math.ceil(args.max_length / 128)} shapes; "
              f"with hf_neuron: {len(ours['shapes'])}")
    print_table_rows(readme_row(kind, label, r) for kind, label, r in rows)


if __name__ == "__main__":
    main()
