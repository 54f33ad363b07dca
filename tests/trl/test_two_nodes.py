"""The announcement's recipe, unchanged, on two nodes: two torchrun launchers on the loopback address
(``--nnodes=2``, 2 processes each, the command that runs across two Trainium hosts), TP=2 within a node
x FSDP=2 across nodes. It trains two epochs with the losses of the same layout on one node, compiles
nothing after the first epoch, and its checkpoint loads on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from trl_sft_helpers import (
    LOSS_TOLERANCE,
    TWO_EPOCHS,
    USER_RECIPE,
    base_args,
    check_standard_checkpoint,
    read_results,
    run_worker_on_two_nodes,
)

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory, tiny_model_dir, chat_dataset):
    root = tmp_path_factory.mktemp("two-nodes")
    out, results = root / "model", root / "results"
    argv = base_args(tiny_model_dir, chat_dataset.parent, out, **TWO_EPOCHS)
    env = {"TP_SIZE": "2", "FSDP_SIZE": "2", "TRL_SFT_USER_SCRIPT": str(USER_RECIPE)}
    outcomes = run_worker_on_two_nodes(2, argv, results, env=env)
    for node_rank, outcome in enumerate(outcomes):
        assert outcome.returncode == 0, f"node {node_rank} failed:\n{outcome.stderr[-6000:]}"
    return {"out": out, "results": read_results(results), "result_dir": results}


def test_every_rank_of_both_nodes_trains_two_epochs(two_nodes):
    results = two_nodes["results"]
    assert sorted(results) == [0, 1, 2, 3]
    assert {r["world_size"] for r in results.values()} == {4}
    for result in results.values():
        assert len(result["graphs_after_epoch"]) == 2
        assert all(math.isfinite(loss) for loss in result["losses"])
        assert {tuple(b["shape"]) for b in result["batches"]} == {(2, 128)}
        first, second = result["graphs_after_epoch"]
        assert second == first, "no graph compiled after the first epoch"


def test_losses_equal_the_same_layout_on_one_node(two_nodes, sft_runs, chat_dataset):
    one_node = sft_runs(
        "two-epochs-recipe-tp2-fsdp2", layout="tp2_fsdp2", script=USER_RECIPE, recipe=TWO_EPOCHS,
        dataset=chat_dataset.parent,
    )
    for rank, result in two_nodes["results"].items():
        expected = one_node["results"][rank]["losses"]
        assert len(result["losses"]) == len(expected)
        assert max(abs(a - b) for a, b in zip(result["losses"], expected)) < LOSS_TOLERANCE


def test_checkpoint_loads_on_cpu(two_nodes, tiny_model_dir):
    reference = torch.load(two_nodes["result_dir"] / "reference.pt")
    check_standard_checkpoint(two_nodes["out"], reference, tiny_model_dir)
