"""The results file: schema, first-failure bookkeeping, atomic writes, headline arithmetic."""

import json

import pytest

from hf_neuron.compat import results as R
from hf_neuron.compat.archs import ArchSpec


def _record(name, rank, statuses, reason="boom", path="compiled"):
    rec = R.new_record(ArchSpec(name, rank=rank, tier="A"))
    for lv, st in zip(R.LEVELS, statuses):
        details = {"path": path} if lv == "L3" and st == "pass" else None
        R.set_level(rec, lv, st, reason=reason if st != "pass" else None, op="aten::x" if st == "fail" else None,
                    details=details)
    return rec


def test_failure_is_the_first_failing_level():
    rec = _record("a", 1, ["pass", "pass", "fail", "fail", "skip"])
    assert rec["failure"] == {"level": "L3", "reason": "boom", "op": "aten::x"}
    assert set(rec["failures"]) == {"L3", "L4"}
    R.set_level(rec, "L3", "pass")
    assert rec["failure"]["level"] == "L4"
    R.set_level(rec, "L4", "pass")
    assert rec["failure"] is None and rec["failures"] == {}


def test_reasons_are_trimmed_to_one_line():
    rec = _record("a", 1, ["fail"], reason="line one\n" + "x" * 2000)
    assert "\n" not in rec["failure"]["reason"]
    assert len(rec["failure"]["reason"]) <= R.REASON_MAX_CHARS


def test_validate_accepts_ours_and_rejects_broken_files(tmp_path):
    results = R.new_results("5.23.0", "2.13.0", "simulated")
    R.upsert(results, _record("b", 2, ["pass"] * 5))
    R.upsert(results, _record("a", 1, ["pass", "fail", "skip", "skip", "skip"]))
    R.upsert(results, _record("zz", None, ["pass"] * 5))
    assert R.validate(results) == []
    assert [r["model_type"] for r in results["architectures"]] == ["a", "b", "zz"]  # rank order, unranked last

    bad = json.loads(json.dumps(results))
    bad["architectures"][1]["levels"]["L2"] = "maybe"
    bad["architectures"][2]["rank"] = 101
    bad["architectures"][0]["failure"] = None
    errors = R.validate(bad)
    assert any("pass|fail|skip" in e for e in errors)
    assert any("rank 101" in e for e in errors)
    assert any("without a failure reason" in e for e in errors)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="not a compatibility results file"):
        R.load(path)


def test_atomic_write_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "r.json"
    results = R.new_results("5.23.0", "2.13.0", "simulated")
    R.write_atomic(path, results)
    before = path.read_text()
    broken = dict(results, architectures=[object()])  # not serialisable: fails half-way through
    with pytest.raises(TypeError):
        R.write_atomic(path, broken)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind


def test_summary_counts_the_ranked_denominator():
    results = R.new_results("5.23.0", "2.13.0", "simulated")
    R.upsert(results, _record("a", 1, ["pass"] * 5))
    R.upsert(results, _record("b", 2, ["pass", "pass", "fail", "pass", "skip"]))
    R.upsert(results, _record("c", 3, ["skip"] * 5, reason="remote code"))
    R.upsert(results, _record("x", None, ["pass"] * 5))
    s = R.summarize(results)
    assert s["headline"] == 1
    assert s["ranked_tested"] == 3
    assert s["cumulative"] == {"L1": 2, "L2": 2, "L3": 1, "L4": 1}
    assert s["per_level"]["L3"] == {"pass": 1, "fail": 1, "skip": 1}
    assert s["all_headline"] == 2


def test_uncompiled_generation_is_counted_apart_from_the_headline():
    results = R.new_results("5.24.0", "2.13.0", "simulated")
    R.upsert(results, _record("a", 1, ["pass"] * 5))
    R.upsert(results, _record("e", 2, ["pass"] * 5, path="eager"))
    old = _record("o", 3, ["pass"] * 5, path=None)  # written before paths were recorded
    old["details"]["L3"] = {}
    old["graphs_compiled"]["L3"] = 0
    R.upsert(results, old)
    s = R.summarize(results)
    assert s["headline"] == 1
    assert s["runs_uncompiled"] == 2 and s["l3_uncompiled"] == 2
    assert s["cumulative"]["L3"] == s["cumulative"]["L4"] == 1
    assert s["per_level"]["L3"]["pass"] == 3  # the level's own count still holds every pass
    assert [R.generation_path(r) for r in results["architectures"]] == ["compiled", "eager", "eager"]


def test_missing_levels_treats_not_requested_as_missing():
    rec = _record("a", 1, ["pass", "pass"])
    R.set_level(rec, "L3", "skip", reason=R.NOT_REQUESTED)
    assert R.missing_levels(rec, R.LEVELS) == ["L3", "L4", "L5"]
    assert R.missing_levels(None, ["L1"]) == ["L1"]


def test_the_task_is_text_generation_or_image_text_to_text():
    from hf_neuron.compat import results as R

    results = R.new_results("5.25.0", "2.14.1", "simulated")
    assert R.validate({**results, "task": R.TASK_IMAGES}) == []
    assert R.validate({**results, "task": "audio"}) == ["task must be 'text-generation' or 'image-text-to-text'"]
