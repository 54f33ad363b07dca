"""torchrun worker of test_tensor_parallel.py: tensor-parallel greedy generation of each model given.

    torchrun --nproc_per_node=N _tp_worker.py OUT.json MODEL_DIR [MODEL_DIR ...]

Each model generates the prompts one at a time, then two at a time, in one process. Rank 0 writes
``{model_dir: {batch size: new token ids}}``; the graphs every rank compiles go to HF_NEURON_GRAPH_LOG.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from transformers import AutoModelForCausalLM, DistributedConfig

from hf_neuron.testing.generation_workload import generate_batches, workload_prompts

PROMPT_LENGTHS = (20, 45, 53, 30)  # remainders 4, 13, 5 and 14 modulo the 16-token chunk
BATCH_SIZES = (1, 2)
GENERATE = {"max_new_tokens": 6, "max_cache_len": 80, "prefill_chunk_size": 16}


def main(out_path, *model_dirs):
    torch.set_num_threads(1)
    dist.init_process_group(backend="neuron")
    world_size = dist.get_world_size()
    mesh = DeviceMesh("neuron", list(range(world_size)))
    results = {}
    for path in model_dirs:
        model = AutoModelForCausalLM.from_pretrained(
            path, distributed_config=DistributedConfig(tp_size=world_size), device_mesh=mesh
        )
        prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS)
        results[path] = {
            batch: [t.tolist() for t in generate_batches(model, prompts, batch, **GENERATE)] for batch in BATCH_SIZES
        }
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
