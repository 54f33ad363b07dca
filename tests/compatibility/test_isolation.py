"""A crashing, raising, exiting or hanging architecture is recorded with its reason; the others are not lost."""

from hf_neuron.compat import results as R

from compat_helpers import records, run_compat


def test_failures_are_recorded_and_the_run_goes_on(test_archs, tmp_path):
    out = tmp_path / "r.json"
    archs = "_test_pass_a,_test_raise_b,_test_exit_c,_test_segv_d,_test_hang_e,_test_fail_f,_test_pass_g"
    assert run_compat("--arch", archs, "--levels", "L1,L2,L3,L4", "--timeout", "3", "-j", "2", "--output", out) == 0
    recs = records(out)
    assert set(recs) == set(archs.split(","))
    assert R.validate(R.load(out)) == []

    for name in ("_test_pass_a", "_test_pass_g"):
        assert recs[name]["levels"] == {"L1": "pass", "L2": "pass", "L3": "pass", "L4": "pass", "L5": "skip"}
        assert recs[name]["failure"] is None

    raised = recs["_test_raise_b"]
    assert raised["failure"]["level"] == "L2"
    assert raised["failure"]["reason"].startswith("RuntimeError: The operator 'aten::fake_op.default'")
    assert raised["failure"]["op"] == "aten::fake_op.default"
    assert raised["levels"]["L3"] == "pass"  # an exception does not take the worker down

    exited = recs["_test_exit_c"]
    assert exited["levels"]["L1"] == "pass" and exited["levels"]["L2"] == "fail"
    assert "worker exited with code 3 in L2" in exited["failure"]["reason"]
    assert exited["skip_reasons"]["L3"] == "not run: the worker died in L2"

    segv = recs["_test_segv_d"]
    assert segv["failure"]["level"] == "L3"
    assert "SIGSEGV" in segv["failure"]["reason"]
    assert "testing_archs.py" in segv["failure"]["op"]  # faulthandler's stack says where

    hung = recs["_test_hang_e"]
    assert hung["failure"]["level"] == "L3"
    assert hung["failure"]["reason"].startswith("timeout after 3s in L3")
    assert "testing_archs.py" in hung["failure"]["op"]  # stack dumped on SIGUSR1 before the kill

    failed = recs["_test_fail_f"]
    assert failed["failure"] == {"level": "L2", "reason": "logits differ from CPU: max abs diff 1 (fake)", "op": None}
