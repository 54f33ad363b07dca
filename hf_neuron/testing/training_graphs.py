"""A Trainer callback that records how many graphs the neuron backend has compiled at each point of a run.

Tests and benchmarks of training ask when graphs are compiled (first steps only? during the second epoch?
by an evaluation?); they all read these lists. Counts come from the simulator's graph log, which every
process of a torchrun job keeps for itself.
"""

from __future__ import annotations

from transformers import TrainerCallback


def _graph_count() -> int:
    from hf_neuron.simulator import graph_log

    return graph_log.graph_count()


class GraphsDuringTraining(TrainerCallback):
    """``after_step`` / ``after_epoch`` / ``after_evaluation``: the process's graph count at each of those
    events; ``by_evaluation``: the graphs compiled during each evaluation (an evaluation runs after its
    step's end)."""

    def __init__(self) -> None:
        self.after_step: list[int] = []
        self.after_epoch: list[int] = []
        self.after_evaluation: list[int] = []
        self.by_evaluation: list[int] = []
        self._mark = 0

    def on_step_end(self, args, state, control, **kwargs):
        self._mark = _graph_count()
        self.after_step.append(self._mark)

    def on_epoch_end(self, args, state, control, **kwargs):
        self.after_epoch.append(_graph_count())

    def on_evaluate(self, args, state, control, **kwargs):
        count = _graph_count()
        self.by_evaluation.append(count - self._mark)
        self.after_evaluation.append(count)
        self._mark = count
