"""The announcement's SFT recipe, unchanged, on a mixture-of-experts model: a tiny Qwen3-MoE for two epochs
under TP=2 and TP=2 x FSDP=2 on the simulated Neuron device.

``DistributedConfig(tp_size=2, ...)`` (the recipe's line) splits the routed experts over the TP ranks;
the run keeps one batch shape, compiles nothing after the first epoch, and saves a checkpoint in
Transformers' format (every expert, gathered) that loads on CPU with the weights the sharded model held.
"""

from __future__ import annotations

import math

import pytest
import torch

from trl_sft_helpers import TWO_EPOCHS, USER_RECIPE, check_standard_checkpoint

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

LAYOUTS = ("tp2", "tp2_fsdp2")


@pytest.fixture(scope="module")
def moe_model_dir(tmp_path_factory):
    from hf_neuron.tiny_models import save_tiny_model

    return save_tiny_model("qwen3_moe", tmp_path_factory.mktemp("trl-moe") / "tiny-qwen3-moe")


@pytest.fixture(scope="module")
def runs(sft_runs, moe_model_dir, chat_dataset):
    def run(layout):
        return sft_runs(f"moe-two-epochs-{layout}", layout=layout, script=USER_RECIPE, recipe=TWO_EPOCHS,
                        dataset=chat_dataset.parent, model_dir=moe_model_dir)

    return run


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_rank_trains_half_of_the_experts(runs, layout):
    results = runs(layout)["results"]
    assert results, "every rank reports"
    for result in results.values():
        experts = result["experts"]
        assert experts["local_experts"] * 2 == experts["experts"], experts
        assert experts["ep_implementation"] == "neuron_static", experts


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_epochs_one_batch_shape_and_no_graph_after_the_first(runs, layout):
    for result in runs(layout)["results"].values():
        assert len(result["graphs_after_epoch"]) == 2, "both epochs ran"
        assert all(math.isfinite(loss) for loss in result["losses"])
        assert {tuple(b["shape"]) for b in result["batches"]} == {(2, 128)}
        assert set(result["graph_status"]) == {"compiled"}
        first, second = result["graphs_after_epoch"]
        assert second == first, result["graphs_after_epoch"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_checkpoint_holds_every_expert_and_loads_on_cpu(runs, layout, moe_model_dir):
    run = runs(layout)
    check_standard_checkpoint(run["out"], torch.load(run["result_dir"] / "reference.pt"), moe_model_dir)
