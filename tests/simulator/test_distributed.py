"""Process-group backend "neuron": collectives, TorchNeuron's limits, DDP/FSDP2/DTensor/TP parity.

One torchrun launch per world size runs every check of ``hf_neuron.testing.distributed_selftest`` on
every rank and reports JSON; the tests below assert it. The launch never calls
``destroy_process_group``, so a clean exit is checked by the launch itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from hf_neuron.simulator import distributed as neuron_dist
from hf_neuron.simulator import is_simulated

pytestmark = pytest.mark.skipif(not is_simulated(), reason="checks the simulator's process-group backend")

WORLD_SIZES = [2, 4]
LAUNCH_TIMEOUT = 900  # seconds; the first launch may wait for the extension build

CHECKS = [
    "init",
    "all_reduce",
    "all_gather",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce_gather_scatter",
    "barrier",
    "all_to_all_single_even",
    "all_to_all_uneven_rejected",
    "send_recv",
    "functional_collectives",
    "cpu_tensor_rejected",
    "one_device_per_process",
    "subgroups_and_barrier_limit",
    "device_mesh_2d_without_split",
    "dtensor_matmul",
    "ddp_equals_single_process",
    "fsdp2_equals_single_process",
    "tp_llama_forward",
    "tp_llama_backward",
]


@pytest.fixture(scope="module")
def built_extension():
    # Built here once, so the ranks of the launches below find it cached.
    return neuron_dist.load_extension()


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"world{n}")
def launch(request, built_extension, tmp_path_factory):
    from hf_neuron.tiny_models import save_tiny_model

    world = request.param
    tmp = tmp_path_factory.mktemp(f"dist{world}")
    # tp_size=4 needs as many kv heads; with 2 ranks the default 4 heads / 2 kv heads is kept (GQA).
    overrides = {"num_key_value_heads": 4} if world == 4 else {}
    model_dir = save_tiny_model("llama", tmp / "llama", **overrides)
    out = tmp / "out"
    env = dict(os.environ, HF_NEURON_SIMULATOR="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
        "-m", "hf_neuron.testing.distributed_selftest", "--out", str(out), "--model-dir", str(model_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    ranks = {}
    for rank in range(world):
        path = out / f"rank{rank}.json"
        ranks[rank] = json.loads(path.read_text()) if path.exists() else None
    return {"world": world, "returncode": proc.returncode, "stderr": proc.stderr[-6000:], "ranks": ranks}


@pytest.mark.distributed
def test_clean_exit_without_destroy_process_group(launch):
    missing = [r for r, res in launch["ranks"].items() if res is None]
    assert not missing, f"ranks {missing} wrote no report:\n{launch['stderr']}"
    assert launch["returncode"] == 0, f"torchrun exited with {launch['returncode']}:\n{launch['stderr']}"


@pytest.mark.distributed
@pytest.mark.parametrize("name", CHECKS)
def test_check(launch, name):
    failures = {}
    for rank, res in launch["ranks"].items():
        if res is None:
            pytest.fail(f"rank {rank} wrote no report:\n{launch['stderr']}")
        got = res["checks"].get(name)
        if got is None:
            failures[rank] = "not run"
        elif not got["ok"]:
            failures[rank] = f"{got['detail']}\n{got.get('traceback', '')}"
    assert not failures, "\n".join(f"rank {r}: {msg}" for r, msg in failures.items())


def test_register_is_idempotent_and_maps_the_neuron_device():
    neuron_dist.register()
    neuron_dist.register()
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["neuron"] == ["neuron"]
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend._plugins["NEURON"].creator_fn is neuron_dist._create_backend


def test_init_after_runtime_initialised_is_rejected():
    neuron_dist.register()
    torch.ones(1, device="neuron")  # initialises the (simulated) Neuron runtime in this process
    try:
        with pytest.raises(RuntimeError, match="before init_process_group"):
            dist.init_process_group(backend="neuron", store=dist.HashStore(), rank=0, world_size=1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
