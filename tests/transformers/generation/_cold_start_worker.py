"""A serving process of the cold-start tests: warm up, or serve mixed traffic, and report the graphs.

    python _cold_start_worker.py warmup|traffic MODEL_DIR OUT.json

``warmup`` runs ``hf_neuron.transformers.generation.warmup`` for batch sizes 1 and 2 with the Neuron generation
defaults; ``traffic`` greedy-generates prompts of 5-500 tokens at batch sizes 1 and 2 with the same
defaults. Both write the graphs handed to the compiler, the compiled-graph cache misses and (for
traffic) the new tokens. Under torchrun each rank warms batch size 1 and a batch size of its own
(cache 128, chunk 32).
"""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

from hf_neuron.graphs import count_graphs
from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.transformers import warmup

BATCH_SIZES = (1, 2)
TRAFFIC_PROMPT_LENGTHS = (5, 77, 300, 500)
MAX_NEW_TOKENS = 4


def main(mode, model_dir, out_path):
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, device_map="neuron")
    result = {}
    with count_graphs() as graphs:
        if mode == "warmup":
            rank = int(os.environ.get("RANK", "0"))
            sizes = BATCH_SIZES if "WORLD_SIZE" not in os.environ else (1, 2 + rank)
            settings = {"max_cache_len": 128, "prefill_chunk_size": 32} if "WORLD_SIZE" in os.environ else {}
            warmup(model, batch_sizes=sizes, progress=False, **settings)
        else:
            prompts = workload_prompts(model.config.vocab_size, TRAFFIC_PROMPT_LENGTHS)
            result["tokens"] = {b: [t.tolist() for t in generate_batches(model, prompts, b, max_new_tokens=MAX_NEW_TOKENS)]
                                for b in BATCH_SIZES}
    result.update(graphs=graphs.count, misses=graphs.misses, keys=[r["cache_key"] for r in graphs.records])
    rank = os.environ.get("RANK", "0")
    with open(f"{out_path}.{rank}" if "WORLD_SIZE" in os.environ else out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
