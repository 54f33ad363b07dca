"""torchrun worker of test_model_tp_plans.py: each tiny checkpoint given, sharded over the ranks, against one device.

    torchrun --nproc_per_node=2 _tp_plans_worker.py OUT.json NAME=MODEL_DIR [NAME=MODEL_DIR ...]

Rank 0 writes ``{name: {"ok": bool, "reason": str, "details": {...}}}`` (logits difference, greedy
tokens, the fraction of decoder-layer weights sharded); one failing model does not stop the others.
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from hf_neuron.compat.tp_worker import compare_with_single_device
from hf_neuron import tiny_models


def main(out_path, *named_dirs):
    torch.set_num_threads(1)
    dist.init_process_group(backend="neuron")
    results = {}
    for item in named_dirs:
        name, _, path = item.partition("=")
        config = json.loads((Path(path) / "config.json").read_text())
        try:
            details = compare_with_single_device(Path(path), tiny_models.model_class_for(config["model_type"]),
                                                 dist.get_world_size())
            results[name] = {"ok": True, "details": details}
        except Exception as exc:  # noqa: BLE001 - recorded, asserted by the test
            results[name] = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"[:600]}
        dist.barrier()
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(results, default=str))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
