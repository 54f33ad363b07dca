"""Declared = verified: the ranges hf_neuron checks at run time are pyproject's, and a release
outside them is reported once."""

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hf_neuron import versions

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_runtime_ranges_are_the_declared_ones():
    declared = {Requirement(line).name: str(Requirement(line).specifier)
                for line in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]}
    ranges = versions.verified_ranges()
    for library in versions.CHECKED:
        assert ranges[library] == declared[library], f"reinstall hf-neuron: its metadata lags pyproject for {library}"
        lower, upper = sorted(s.operator for s in Requirement(f"{library}{ranges[library]}").specifier)
        assert (lower, upper) == ("<", ">="), f"{library} needs a tested lower bound and an upper bound"


def test_installed_releases_are_verified():
    assert {library: versions.is_verified(library) for library in versions.CHECKED} == dict.fromkeys(
        versions.CHECKED, True
    )


def test_a_forced_newer_release_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(versions, "_warned", set())
    monkeypatch.setattr(versions, "installed_version", lambda library: "99.0.0")
    with caplog.at_level("WARNING", logger="hf_neuron"):
        versions.warn_if_unverified("transformers")
        versions.warn_if_unverified("transformers")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "transformers 99.0.0" in messages[0] and versions.verified_ranges()["transformers"] in messages[0]


@pytest.mark.parametrize("library", ["transformers", "trl", "diffusers", "peft"])
def test_a_verified_release_is_quiet(library, monkeypatch, caplog):
    monkeypatch.setattr(versions, "_warned", set())
    with caplog.at_level("WARNING", logger="hf_neuron"):
        versions.warn_if_unverified(library)
    assert not caplog.records
