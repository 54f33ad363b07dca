"""L5 runs under torchrun (2 processes); a hung TP job is recorded and the next architecture still runs."""

import pytest

from compat_helpers import records, run_compat


@pytest.mark.distributed
def test_l5_runs_under_torchrun_and_survives_a_hang(test_archs, tmp_path):
    out = tmp_path / "r.json"
    archs = "_test_pass_tp1,_test_tphang_2,_test_pass_tp3,_test_pass_4"
    assert run_compat("--arch", archs, "--timeout", "5", "-j", "2", "--output", out) == 0
    recs = records(out)
    for name in ("_test_pass_tp1", "_test_pass_tp3"):
        assert recs[name]["levels"]["L5"] == "pass"
        assert recs[name]["details"]["L5"] == {"tp_size": 2}
    hung = recs["_test_tphang_2"]
    assert hung["levels"]["L5"] == "fail"
    assert hung["failure"]["reason"].startswith("timeout after 5s (hang) in TP=2 job")
    assert "tp_worker.py" in hung["failure"]["op"]
    no_plan = recs["_test_pass_4"]
    assert no_plan["levels"]["L5"] == "skip"
    assert "tensor-parallel plan" in no_plan["skip_reasons"]["L5"]
