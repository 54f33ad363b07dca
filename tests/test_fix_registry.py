"""The fix registry: detection decides, HF_NEURON_DISABLE opts out, the docstring is the gap."""

import pytest

from hf_neuron import fixes


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    monkeypatch.setattr(fixes, "_FIXES", {})


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
