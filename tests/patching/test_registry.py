"""The fix registry: detection decides, HF_NEURON_DISABLE opts out, the docstring is the gap."""

import pytest

from hf_neuron.patching import registry as fixes


@pytest.fixture(autouse=True)
def isolated_registry():
    with fixes.scratch_registry():
        yield


def test_registry_applies_only_detected_gaps(monkeypatch):
    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)
    calls = []

    @fixes.fix("test_needed", "testlib", detect=lambda: True)
    def needed():
        """Fills a gap that exists.

        More detail."""
        calls.append("needed")

    @fixes.fix("test_not_needed", "testlib", detect=lambda: False)
    def not_needed():
        """Upstream closed this one."""
        calls.append("not_needed")

    applied = fixes.apply_fixes("testlib")
    assert [f.name for f in applied] == ["test_needed"] and calls == ["needed"]
    assert fixes.get_fix("test_needed").gap == "Fills a gap that exists."
    assert fixes.get_fix("test_not_needed").reason == "upstream already closes this gap"
    assert fixes.apply_fixes("testlib") == []  # idempotent


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("HF_NEURON_DISABLE", "1")

    @fixes.fix("test_disabled", "otherlib", detect=lambda: True)
    def disabled():
        """Never applied under HF_NEURON_DISABLE."""
        raise AssertionError("must not run")

    assert fixes.apply_fixes("otherlib") == []
    assert fixes.get_fix("test_disabled").reason == "HF_NEURON_DISABLE=1"


def test_disable_one_fix_by_name(monkeypatch):
    monkeypatch.setenv("HF_NEURON_DISABLE", "test_named_off, test_also_off")
    calls = []

    @fixes.fix("test_named_off", "namedlib", detect=lambda: True)
    def named_off():
        """Left out by name."""
        calls.append("named_off")

    @fixes.fix("test_still_on", "namedlib", detect=lambda: True)
    def still_on():
        """Not named: applied."""
        calls.append("still_on")

    assert [f.name for f in fixes.apply_fixes("namedlib")] == ["test_still_on"]
    assert calls == ["still_on"]
    assert fixes.get_fix("test_named_off").status == fixes.DISABLED
    assert "test_named_off" in fixes.get_fix("test_named_off").reason
    assert not fixes.adapters_disabled()


def test_a_detector_that_cannot_decide_is_loud_once(monkeypatch, caplog):
    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)
    calls = []

    def broken():
        calls.append("detect")
        raise KeyError("a keyword this release renamed")

    @fixes.fix("test_broken", "pytest", detect=broken)
    def never():
        """Would fill a gap, if anyone could tell."""
        raise AssertionError("an undecided fix must not be applied")

    with caplog.at_level("WARNING", logger="hf_neuron"):
        assert fixes.apply_fixes("pytest") == []
        assert fixes.apply_fixes("pytest") == []  # decided: not detected (nor warned) again
    entry = fixes.get_fix("test_broken")
    assert entry.status == fixes.UNKNOWN and not entry.active
    assert "pytest " in entry.reason and "KeyError" in entry.reason  # names the installed release
    assert fixes.unknown_fixes() == [entry]
    warnings = [r.getMessage() for r in caplog.records if "test_broken" in r.getMessage()]
    assert len(warnings) == 1 and "pytest" in warnings[0]
    assert calls == ["detect"]


def test_a_pending_detector_is_asked_again(monkeypatch):
    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)
    ready = []

    @fixes.fix("test_pending", "testlib", detect=lambda: True if ready else fixes.PENDING)
    def later():
        """Applied once its module exists."""

    assert fixes.apply_fixes("testlib") == [] and fixes.get_fix("test_pending").status == fixes.WAITING
    ready.append(True)
    assert [f.name for f in fixes.apply_fixes("testlib")] == ["test_pending"]


def test_env_check_fails_on_an_undecidable_fix(monkeypatch, capsys):
    from hf_neuron.commands import env

    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)

    @fixes.fix("test_broken_detector", "transformers", detect=lambda: {}["cache"])
    def never():
        """A fix whose probe broke on a new release."""

    fixes.apply_fixes("transformers")
    monkeypatch.setattr(env, "collect", lambda: _collected(env))
    assert env.run(type("Args", (), {"json": False, "markdown": False, "check": True})()) == 1
    captured = capsys.readouterr()
    assert "UNKNOWN" in captured.out and "test_broken_detector" in captured.err

    fixes.get_fix("test_broken_detector").status = fixes.CLOSED
    assert env.run(type("Args", (), {"json": False, "markdown": False, "check": True})()) == 0


def _collected(env):
    versions = {name: "1.0" for name in env.LIBRARIES}
    return {
        "hf_neuron": "0", "python": "3", "platform": "linux", "versions": versions, "verified_ranges": {},
        "unverified": [], "torch_neuronx": "simulated", "devices": [],
        "fixes": [
            {"name": f.name, "library": f.library, "active": f.active, "status": f.status, "reason": f.reason,
             "gap": f.gap}
            for f in fixes.all_fixes()
        ],
    }


def test_a_fix_waiting_for_a_module_is_decided_when_it_is_imported(scratch_modules, monkeypatch):
    import sys

    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)
    scratch_modules("hfn_waited_module.py", "VALUE = 1\n")
    seen = []

    @fixes.fix("test_waiting", "testlib", detect=lambda: sys.modules["hfn_waited_module"].VALUE == 1,
               waits_for="hfn_waited_module")
    def waiting():
        """Changes a module imported later."""
        seen.append("applied")

    assert fixes.apply_fixes("testlib") == []
    entry = fixes.get_fix("test_waiting")
    assert entry.status == fixes.WAITING and "hfn_waited_module" in entry.reason and seen == []
    import hfn_waited_module  # noqa: F401

    assert entry.status == fixes.APPLIED and seen == ["applied"]
