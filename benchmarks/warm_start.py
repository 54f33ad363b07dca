"""Cold start vs warm start of a generation server on Neuron: graphs compiled and time to first token.

    HF_NEURON_SIMULATOR=1 python benchmarks/warm_start.py [--arch llama] [--batch-sizes 1,4]

Each row is a fresh serving process (a tiny random model, the Neuron generation defaults:
``max_cache_len=1024``, prefill chunk 512) that answers the same mixed traffic - prompts of 5-500
tokens at every planned batch size - and reports the graphs handed to the compiler, how many of them
the compiled-graph cache did not have (misses: on Trainium each one is a neuronx-cc compile of
minutes), and the time to the first token of its first request:

- ``cold``: an empty compiled-graph cache;
- ``warmed in process``: ``hf_neuron.transformers.generation.warmup`` first, then the traffic in the same process;
- ``new process, warmed cache``: a new process on the cache the warm-up filled;
- ``new process, imported cache``: the warmed cache exported (``hf-neuron cache export``) and imported
  into an empty cache directory (``hf-neuron cache import``), as on a new instance of a fleet.

All rows come from this one run. The simulator's compile is Dynamo tracing only (no neuronx-cc), so
its first-token times do not show what a hit saves on Trainium; the miss counts carry over as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_neuron.testing.benchmark_tables import print_table_rows

PROMPT_LENGTHS = (5, 90, 240, 500)
NEW_TOKENS = 4


def child(mode: str, model_dir: str, batch_sizes: list[int]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from hf_neuron.testing.generation_workload import left_pad, workload_prompts
    from hf_neuron.graphs import count_graphs
    from hf_neuron.transformers import warmup

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, device_map="neuron")
    prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS)
    if mode == "warmup-only":
        report = warmup(model, batch_sizes=batch_sizes, progress=False)
        print("RESULT " + json.dumps({"graphs": report.graphs, "misses": report.misses}))
        return
    if mode == "warmed in process":
        warmup(model, batch_sizes=batch_sizes, progress=False)
    first_token = None
    with count_graphs() as graphs:
        for batch in batch_sizes:
            for start in range(0, len(prompts), batch):
                chunk = prompts[start:start + batch]
                chunk = chunk + chunk[:1] * (batch - len(chunk))  # a server pads a short batch
                input_ids, attention_mask = left_pad(chunk, model.generation_config.pad_token_id)
                began = time.perf_counter()
                with torch.no_grad():
                    model.generate(input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                                   max_new_tokens=1 if first_token is None else NEW_TOKENS, do_sample=False)
                if first_token is None:
                    first_token = time.perf_counter() - began
    print("RESULT " + json.dumps({"graphs": graphs.count, "misses": graphs.misses, "first_token_s": first_token}))


def run_child(mode: str, model_dir: Path, cache_dir: Path, batch_sizes: list[int]) -> dict:
    env = dict(os.environ, HF_NEURON_SIMULATOR=os.environ.get("HF_NEURON_SIMULATOR", "1"),
               TORCH_NEURONX_NEFF_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1")
    env.pop("HF_NEURON_GRAPH_LOG", None)
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(model_dir),
                           ",".join(map(str, batch_sizes))], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def cache_command(action: str, archive: Path, cache_dir: Path) -> None:
    env = dict(os.environ, HF_NEURON_SIMULATOR=os.environ.get("HF_NEURON_SIMULATOR", "1"),
               TORCH_NEURONX_NEFF_CACHE_DIR=str(cache_dir))
    subprocess.run([sys.executable, "-m", "hf_neuron.cli", "cache", action, str(archive)], env=env, check=True,
                   capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="llama", help="tiny model architecture (default: llama)")
    parser.add_argument("--batch-sizes", default="1,4", help="planned batch sizes (default: 1,4)")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "MODEL", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, model_dir, batches = args.child
        child(mode, model_dir, [int(b) for b in batches.split(",")])
        return 0

    from hf_neuron.tiny_models import save_tiny_model

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model_dir = save_tiny_model(args.arch, root / args.arch)
        rows = {"cold": run_child("cold", model_dir, root / "cold", batch_sizes),
                "warmed in process": run_child("warmed in process", model_dir, root / "in-process", batch_sizes)}
        warm = run_child("warmup-only", model_dir, root / "warmed", batch_sizes)
        rows["new process, warmed cache"] = run_child("serve", model_dir, root / "warmed", batch_sizes)
        cache_command("export", root / "graphs.tar.gz", root / "warmed")
        cache_command("import", root / "graphs.tar.gz", root / "imported")
        rows["new process, imported cache"] = run_child("serve", model_dir, root / "imported", batch_sizes)

    cold = rows["cold"]
    print(f"tiny {args.arch}, batch sizes {batch_sizes}, prompts {list(PROMPT_LENGTHS)} tokens, defaults "
          f"(max_cache_len 1024, prefill chunk 512); the warm-up compiled {warm['misses']} of {warm['graphs']} graphs\n")
    print(f"{'process':<30} {'graphs':>6} {'misses':>7} {'misses vs cold':>15} {'first token':>12} {'vs cold':>8}")
    print("-" * 83)
    for name, r in rows.items():
        print(f"{name:<30} {r['graphs']:>6} {r['misses']:>7} {r['misses'] / max(cold['misses'], 1):>15.2f} "
              f"{r['first_token_s']:>11.2f}s {r['first_token_s'] / cold['first_token_s']:>8.2f}")
    print("\n(graphs: handed to the compiler by the traffic; misses: not in the compiled-graph cache, i.e. compiled."
          " The simulator's compile is tracing only, so a hit saves no time here; on Trainium each miss adds a"
          " neuronx-cc compile of minutes to the first request)")
    print_table_rows(f"| {name} | {r['graphs']} | {r['misses']} | {r['first_token_s'] / cold['first_token_s']:.2f} |"
                     for name, r in rows.items())
    return 0


if __name__ == "__main__":
    sys.exit(main())
