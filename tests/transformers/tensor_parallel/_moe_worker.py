"""torchrun worker of test_experts.py: mixture-of-experts models under one distributed layout.

    torchrun --nproc_per_node=N _moe_worker.py OUT.pt LAYOUT MODEL_DIR [MODEL_DIR ...]

LAYOUT is ``tp`` (``DistributedConfig(tp_size=N)``, the announcement's line: greedy generation and a
training step), ``tp-padded`` (the same with ``ep_implementation="neuron_padded_all_to_all"``: a training
step) or ``fsdp-ep`` (``DistributedConfig(fsdp_size=N, ep_size=N)``: each rank trains on its own row of
the batch). Rank 0 saves ``{model_dir: {"layout", "loading", "tokens", "loss", "grads"}}`` (``loading``:
per rank, the peak device memory while ``from_pretrained`` ran and the model's footprint after it, in
bytes); the graphs every rank compiles go to HF_NEURON_GRAPH_LOG.
"""

import gc
import os
import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, DistributedConfig

from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.transformers.tensor_parallel.experts import expert_layout

PROMPT_LENGTHS = (20, 45, 30)
BATCH_SIZES = (1, 2)
GENERATE = {"max_new_tokens": 5, "max_cache_len": 80, "prefill_chunk_size": 16}
TRAIN_ROWS, TRAIN_LENGTH = 2, 12
#: Parameters whose full gradients are compared with CPU's: the router, the routed experts, attention.
GRADIENT_SUFFIXES = ("mlp.gate.weight", "mlp.router.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                     "self_attn.o_proj.weight")

LAYOUTS = {
    "tp": lambda n: DistributedConfig(tp_size=n),
    "tp-padded": lambda n: DistributedConfig(tp_size=n, ep_implementation="neuron_padded_all_to_all"),
    "fsdp-ep": lambda n: DistributedConfig(fsdp_size=n, ep_size=n),
}


def training_batch(vocab_size: int) -> torch.Tensor:
    return torch.randint(3, vocab_size, (TRAIN_ROWS, TRAIN_LENGTH), generator=torch.Generator().manual_seed(5))


def compared_gradients(model) -> dict:
    """Full gradients (DTensors gathered) of the parameters named by GRADIENT_SUFFIXES, on CPU."""
    grads = {}
    for name, parameter in model.named_parameters():
        if parameter.grad is None or not name.endswith(GRADIENT_SUFFIXES):
            continue
        grad = parameter.grad
        grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().cpu()
    return grads


def main(out_path, layout, *model_dirs):
    torch.set_num_threads(1)
    dist.init_process_group(backend="neuron")
    world, rank = dist.get_world_size(), dist.get_rank()
    results = {}
    for path in model_dirs:
        device = torch.device("neuron", int(os.environ.get("LOCAL_RANK", "0")))
        gc.collect()  # the previous model's memory is free before the measurement starts
        before = torch.neuron.memory_allocated(device)
        torch.neuron.reset_peak_memory_stats(device)
        model = AutoModelForCausalLM.from_pretrained(path, distributed_config=LAYOUTS[layout](world))
        loading = (torch.neuron.max_memory_allocated(device) - before, torch.neuron.memory_allocated(device) - before)
        record = {"layout": expert_layout(model), "loading": [None] * world}
        dist.all_gather_object(record["loading"], loading)
        if layout == "tp":
            prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS)
            record["tokens"] = {batch: [t.tolist() for t in generate_batches(model, prompts, batch, **GENERATE)]
                                for batch in BATCH_SIZES}
        ids = training_batch(model.config.vocab_size)
        if layout == "fsdp-ep":
            ids = ids[rank::world]  # each rank its own rows
        model.train()
        ids = ids.to(model.device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses = [torch.zeros(1) for _ in range(world)]
        dist.all_gather_object(losses, loss.item())
        record["loss"] = losses
        record["grads"] = compared_gradients(model)
        results[path] = record
        del model
    if rank == 0:
        torch.save(results, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
