"""Fake architectures for testing the harness itself (crash, hang, failure, resume), enabled only when
``HF_NEURON_COMPAT_TEST_ARCHS=1``. They build no model, so the harness tests stay fast.

The behaviour comes from the name: ``_test_pass*`` passes every level (``..._tp...`` also has a TP
plan, so L5 runs); ``_test_fail*`` fails L2's check; ``_test_raise*`` raises in L2 naming an aten op;
``_test_exit*`` kills its worker in L2 (``os._exit``); ``_test_segv*`` segfaults in L3;
``_test_hang*`` hangs in L3; ``_test_tphang*`` has a TP plan and hangs in L5; ``_test_flaky*`` fails L2 unless ``HF_NEURON_COMPAT_TEST_FIXED=1``;
``_test_slow*`` sleeps ``HF_NEURON_COMPAT_TEST_SLOW`` seconds (default 0.5) per level.
Each run appends ``<model_type> <level>`` lines to ``$HF_NEURON_COMPAT_TEST_LOG`` when set.
"""

from __future__ import annotations

import os
import signal
import time

from hf_neuron.compat.levels import ArchRun, LevelFailure


def log_run(model_type: str, level: str) -> None:
    path = os.environ.get("HF_NEURON_COMPAT_TEST_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{model_type} {level}\n")


def behaviour(model_type: str) -> str:
    return model_type[len("_test_"):].split("_")[0]


class FakeArchRun(ArchRun):
    def _level(self, level: str) -> dict:
        name = self.spec.model_type
        kind = behaviour(name)
        log_run(name, level)
        if kind == "slow":
            time.sleep(float(os.environ.get("HF_NEURON_COMPAT_TEST_SLOW", "0.5")))
        if level == "L2":
            if kind == "fail":
                raise LevelFailure("logits differ from CPU: max abs diff 1 (fake)")
            if kind == "raise":
                raise RuntimeError("The operator 'aten::fake_op.default' is not implemented for 'neuron'")
            if kind == "exit":
                os._exit(3)
            if kind == "flaky" and os.environ.get("HF_NEURON_COMPAT_TEST_FIXED") != "1":
                raise LevelFailure("flaky failure (fake)")
        if level == "L3":
            if kind == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if kind == "hang":
                while True:
                    time.sleep(1)
            self.record["graphs_compiled"]["L3"] = 2
        if level == "L1":
            self.record["model_class"] = "FakeForCausalLM"
            return {"tp_plan": "_tp" in name}
        return {}

    def level_l1(self):
        return self._level("L1")

    def level_l2(self):
        return self._level("L2")

    def level_l3(self):
        return self._level("L3")

    def level_l4(self):
        return self._level("L4")
