"""Resuming a stopped run: ``--resume_from_checkpoint`` from a run's checkpoint continues with the losses
of the uninterrupted run, in one process and sharded TP=2 x FSDP=2, and compiles no graph the
uninterrupted run did not."""

from __future__ import annotations

import pytest

from trl_sft_helpers import LOSS_TOLERANCE

pytestmark = [pytest.mark.slow]

STEPS, STOP = 6, 3
# Constant learning rate: the run stopped at step 3 (its own max_steps) and the full run share the schedule.
RESUMABLE = dict(
    max_length=128, max_steps=STEPS, per_device_train_batch_size=2, save_strategy="steps", save_steps=STOP,
    save_only_model="false",
)


@pytest.mark.parametrize("layout", ["single", pytest.param("tp2_fsdp2", marks=pytest.mark.distributed)])
def test_resumed_run_continues_the_uninterrupted_one(sft_runs, layout):
    # The uninterrupted run saves a checkpoint every STOP steps: the one at step STOP is what a run
    # stopped there leaves (the same weights, optimizer, schedule and data position).
    full = sft_runs(f"resume-full-{layout}", layout=layout, recipe=RESUMABLE)
    checkpoint = full["out"] / f"checkpoint-{STOP}"
    assert checkpoint.is_dir()
    resumed = sft_runs(
        f"resume-resumed-{layout}", layout=layout, recipe=RESUMABLE, resume_from_checkpoint=str(checkpoint)
    )
    for rank, result in resumed["results"].items():
        expected = full["results"][rank]
        assert len(result["losses"]) == STEPS, result["losses"]
        deltas = [abs(a - b) for a, b in zip(result["losses"], expected["losses"])]
        assert max(deltas) < LOSS_TOLERANCE, (result["losses"], expected["losses"])
        # the resumed process compiles at most the uninterrupted run's graphs, and only graphs it had
        assert len(result["graph_inputs"]) <= len(expected["graph_inputs"])
        assert all(graph in expected["graph_inputs"] for graph in result["graph_inputs"])


@pytest.mark.distributed
def test_upstream_cannot_checkpoint_a_sharded_run(tiny_model_dir, chat_dataset, tmp_path):
    """Without ``trainer-resume-sharded-models`` the Trainer refuses the resumable checkpoints at once."""
    from trl_sft_helpers import base_args, run_worker

    argv = base_args(tiny_model_dir, chat_dataset, tmp_path / "out", **dict(RESUMABLE, max_steps=STOP))
    proc = run_worker(
        4, argv, tmp_path / "results",
        env={"TP_SIZE": "2", "FSDP_SIZE": "2", "HF_NEURON_DISABLE": "trainer-resume-sharded-models"},
    )
    assert proc.returncode != 0
    assert "Resuming is not supported for models sharded at load time" in proc.stderr
