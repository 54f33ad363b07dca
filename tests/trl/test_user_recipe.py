"""The announcement's SFT recipe, unchanged, for whole epochs on the simulated Neuron device.

Users copy ``sft_neuron_example.py`` as published (``scripts/recipes/``, byte for byte): no
``dataloader_drop_last``, TRL's default activation checkpointing, ``--torch_compile true``. The tiny
dataset packs into a number of rows that the batch does not divide, so every epoch ends with a short
batch. The run must finish two epochs with one batch shape, compile nothing after the first epoch,
log the losses of the same run on CPU, and save a checkpoint that loads on CPU. A user who never
read about Neuron's static shapes drops the recipe's ``automatic_dynamic_shapes`` line: that script
must run the same.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from trl_sft_helpers import (
    LOSS_TOLERANCE,
    TWO_EPOCHS,
    USER_RECIPE,
    chat_rows,
    check_standard_checkpoint,
    user_script_with_evaluation,
    user_script_without_static_shapes,
    write_jsonl,
)

pytestmark = [pytest.mark.slow]

SHARED_RECIPE = Path(__file__).resolve().parents[3] / "shared" / "recipes" / "sft_neuron_example.py"




@pytest.fixture(scope="module")
def no_static_shapes_script(tmp_path_factory):
    return user_script_without_static_shapes(tmp_path_factory.mktemp("user-script"))


@pytest.fixture(scope="module")
def runs(sft_runs, no_static_shapes_script, chat_dataset):
    def run(name):
        script, layout = {
            "recipe-tp2": (USER_RECIPE, "tp2"),
            "recipe-tp2-fsdp2": (USER_RECIPE, "tp2_fsdp2"),
            "user-single": (no_static_shapes_script, "single"),
            "user-fsdp2": (no_static_shapes_script, "fsdp2"),
        }[name]
        # the recipe reads a dataset folder (`load_dataset(name, split=...)`): the one holding the JSONL file
        return sft_runs(
            f"two-epochs-{name}", layout=layout, script=script, recipe=TWO_EPOCHS, dataset=chat_dataset.parent
        )

    return run


RUNS = ["user-single", "recipe-tp2", "user-fsdp2", "recipe-tp2-fsdp2"]
#: The runs as test parameters: all but the single-process one start torchrun jobs.
RUN_PARAMS = [name if name == "user-single" else pytest.param(name, marks=pytest.mark.distributed) for name in RUNS]
ONE_DATA_SHARD = {"user-single", "recipe-tp2"}


def test_the_recipe_is_the_published_one():
    if not SHARED_RECIPE.exists():
        pytest.skip("the published recipes folder is not beside this checkout")
    assert USER_RECIPE.read_bytes() == SHARED_RECIPE.read_bytes()


@pytest.mark.parametrize("name", RUN_PARAMS)
def test_two_epochs_with_one_batch_shape(runs, name):
    results = runs(name)["results"]
    assert results, "every rank reports"
    for result in results.values():
        assert len(result["graphs_after_epoch"]) == 2, "both epochs ran"
        assert all(math.isfinite(loss) for loss in result["losses"])
        shapes = {tuple(b["shape"]) for b in result["batches"]}
        assert shapes == {(2, 128)}, shapes
        if name in ONE_DATA_SHARD:
            # the run did have a short batch, the last of each epoch, filled with rows that train nothing
            # (with data parallelism, Accelerate's `even_batches` already completes it from the epoch's start)
            assert sum(b["ignored_rows"] for b in result["batches"]) >= 2, result["batches"]
        assert set(result["graph_status"]) == {"compiled"}


@pytest.mark.parametrize("name", RUN_PARAMS)
def test_no_graph_compiled_after_the_first_epoch(runs, name):
    for result in runs(name)["results"].values():
        first, second = result["graphs_after_epoch"]
        assert second == first, result["graphs_after_epoch"]


def test_losses_equal_the_same_run_on_cpu(runs, sft_runs, chat_dataset):
    neuron = runs("user-single")["results"][0]["losses"]
    cpu_run = sft_runs(
        "two-epochs-cpu", script=USER_RECIPE, recipe=TWO_EPOCHS, dataset=chat_dataset.parent, use_cpu="true",
        torch_compile="false",
        env={"HF_NEURON_SIMULATOR": "0"},
    )
    cpu = cpu_run["results"][0]["losses"]
    cpu_shapes = {tuple(b["shape"]) for b in cpu_run["results"][0]["batches"]}
    assert cpu_shapes == {(2, 128), (1, 128)}, "CPU keeps the short batch"
    assert len(neuron) == len(cpu)
    deltas = [abs(a - b) for a, b in zip(neuron, cpu)]
    assert max(deltas) < LOSS_TOLERANCE, (neuron, cpu)


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["recipe-tp2", "recipe-tp2-fsdp2"])
def test_checkpoint_loads_on_cpu(runs, name, tiny_model_dir):
    run = runs(name)
    check_standard_checkpoint(run["out"], torch.load(run["result_dir"] / "reference.pt"), tiny_model_dir)


# --- evaluation during training ---------------------------------------------------------------------

# One epoch of 20 optimizer steps, an evaluation every 6: evaluations during training. The eval
# batch (3) does not divide the packed evaluation rows, so every evaluation ends with a short batch.
WITH_EVALUATION = dict(
    TWO_EPOCHS, num_train_epochs=1, eval_strategy="steps", eval_steps=6, per_device_eval_batch_size=3,
    dataset_test_split="test",
)


@pytest.fixture(scope="module")
def evaluation_runs(sft_runs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat-with-test-split")
    write_jsonl(folder / "train.jsonl", chat_rows(64))
    write_jsonl(folder / "test.jsonl", chat_rows(20, seed=5))
    script = user_script_with_evaluation(tmp_path_factory.mktemp("eval-script"))
    neuron = sft_runs("evaluation-neuron", script=script, recipe=WITH_EVALUATION, dataset=folder)
    cpu = sft_runs(
        "evaluation-cpu", script=script, recipe=WITH_EVALUATION, dataset=folder, use_cpu="true", torch_compile="false",
        env={"HF_NEURON_SIMULATOR": "0"},
    )
    return neuron["results"][0], cpu["results"][0]


def test_evaluation_compiles_at_the_first_evaluation_only(evaluation_runs):
    neuron, _ = evaluation_runs
    after = neuron["graphs_after_evaluation"]
    assert len(after) >= 3, after  # at steps 6, 12, 18 (and the last step)
    steps_before_first_eval = WITH_EVALUATION["eval_steps"]
    assert after[0] > neuron["graphs_after_step"][steps_before_first_eval - 2], "the first evaluation compiles"
    assert after == [after[0]] * len(after), after
    assert neuron["graphs_after_step"][-1] == after[0], "training compiles nothing after the evaluations"
    assert set(neuron["graph_status"]) == {"compiled"}


def test_evaluation_batches_have_one_shape(evaluation_runs):
    neuron, cpu = evaluation_runs
    assert {tuple(b["shape"]) for b in neuron["eval_batches"]} == {(3, 128)}
    assert sum(b["ignored_rows"] for b in neuron["eval_batches"]) >= 3, "each evaluation ended with a short batch"
    assert len({tuple(b["shape"]) for b in cpu["eval_batches"]}) == 2, "on CPU the last batch stays short"


def test_evaluation_losses_equal_cpu(evaluation_runs):
    neuron, cpu = evaluation_runs
    assert len(neuron["eval_losses"]) == len(cpu["eval_losses"]) >= 3
    deltas = [abs(a - b) for a, b in zip(neuron["eval_losses"], cpu["eval_losses"])]
    assert max(deltas) < LOSS_TOLERANCE, (neuron["eval_losses"], cpu["eval_losses"])
