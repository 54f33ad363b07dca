"""Expert-parallel dispatch on Neuron, side by side: upstream's all-reduce and all-to-all, hf_neuron's
padded all-to-all.

One MoE layer of a tiny Qwen3-MoE (8 experts, 2 per token) sharded with ``DistributedConfig(tp_size=N)``
(the EP group is the TP group, every rank holds the batch), forward and backward on T tokens under each
``ep_implementation``. Printed per implementation, measured in this run:

- collective bytes per token: the bytes of every tensor handed to a collective in the layer's forward
  and backward, per rank, divided by T, also in hidden vectors (``hidden_size`` x 4 bytes);
- peak device memory per rank over the step, above what was allocated before it;
- graphs: the layer's forward and backward compiled (``backend="neuron"``, static shapes) and run on two
  routings of the same token count; a routing that changes a shape or a split compiles again.

Run: HF_NEURON_SIMULATOR=1 python benchmarks/moe_dispatch.py [--ranks 2] [--tokens 64]
(it starts ``torchrun --nproc_per_node=RANKS`` on itself).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

IMPLEMENTATIONS = ("all_reduce", "neuron_padded_all_to_all", "all_to_all")
HIDDEN, EXPERTS, TOP_K = 64, 8, 2


def _collective_bytes():
    """A dispatch mode that adds up the bytes of the tensors every collective op is handed."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class CollectiveBytes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            namespace = func.namespace
            if namespace in ("c10d", "_c10d_functional", "_c10d_functional_autograd") and "wait" not in func.__name__:
                first = args[0]
                tensors = first if isinstance(first, (list, tuple)) else [first]
                self.bytes += sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
            return func(*args, **(kwargs or {}))

    return CollectiveBytes()


def worker(model_dir: str, tokens: int) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, DistributedConfig

    from hf_neuron.graphs import count_graphs

    dist.init_process_group(backend="neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for implementation in IMPLEMENTATIONS:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, distributed_config=DistributedConfig(tp_size=world, ep_implementation=implementation))
        experts = model.model.layers[0].mlp.experts
        assert model.config.num_experts == EXPERTS and model.config.hidden_size == HIDDEN, model.config
        device = model.device
        generator = torch.Generator().manual_seed(0)
        hidden = torch.randn(tokens, HIDDEN, generator=generator).to(device).requires_grad_()
        routings = [torch.stack([torch.randperm(EXPERTS, generator=generator)[:TOP_K] for _ in range(tokens)]).to(device)
                    for _ in range(2)]
        weights = torch.full((tokens, TOP_K), 1.0 / TOP_K).to(device)

        def step(index):
            experts(hidden, index, weights).sum().backward()

        row = {"implementation": implementation}
        try:
            counter = _collective_bytes()
            torch.neuron.synchronize()
            torch.neuron.reset_peak_memory_stats()
            before = torch.neuron.memory_allocated()
            with counter:
                step(routings[0])
            torch.neuron.synchronize()
            row["bytes_per_token"] = counter.bytes / tokens
            row["peak_kib"] = (torch.neuron.max_memory_allocated() - before) / 1024
            compiled = torch.compile(step, backend="neuron", dynamic=False)
            with torch._dynamo.config.patch(automatic_dynamic_shapes=False), count_graphs() as graphs:
                for index in routings:
                    compiled(index)
            row["graphs"] = graphs.count
        except Exception as exc:  # noqa: BLE001 - reported, as a user would see it
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"
        rows.append(row)
        del model, experts
    if rank == 0:
        vector = HIDDEN * 4
        print(f"one MoE layer, {tokens} tokens, hidden {HIDDEN} (float32), {EXPERTS} experts, top-{TOP_K}, "
              f"TP=EP={world} (shared batch); per rank, forward + backward")
        print(f"{'ep_implementation':<28}{'bytes/token':>12}{'hidden vectors/token':>22}{'peak KiB':>10}{'graphs':>8}")
        for row in rows:
            if "error" in row:
                print(f"{row['implementation']:<28}fails: {row['error']}")
                continue
            print(f"{row['implementation']:<28}{row['bytes_per_token']:>12.0f}{row['bytes_per_token'] / vector:>22.2f}"
                  f"{row['peak_kib']:>10.0f}{row['graphs']:>8}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--worker", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.tokens)
        return
    from hf_neuron.tiny_models import save_tiny_model

    with tempfile.TemporaryDirectory() as folder:
        save_tiny_model("qwen3_moe", folder, num_local_experts=EXPERTS, num_key_value_heads=4, hidden_size=HIDDEN)
        env = dict(os.environ, HF_NEURON_SIMULATOR=os.environ.get("HF_NEURON_SIMULATOR", "1"), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
                        __file__, "--worker", folder, "--tokens", str(args.tokens)], env=env, check=True)


if __name__ == "__main__":
    main()
