"""Tiny pipelines per family on the neuron device (text encoder on CPU) equal CPU, eager and compiled."""

from __future__ import annotations

import diffusers  # noqa: F401
import pytest

from hf_neuron.compat.diffusers.pipeline_check import check_family
from hf_neuron.testing.tiny_pipelines import FAMILIES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_pipeline_on_device_matches_cpu(family):
    record = check_family(family)
    assert record["ok"], record.get("traceback", record)
    assert record["eager_max_abs_diff"] <= 1e-4
    assert record["compiled_max_abs_diff"] <= 1e-4
    assert record["graphs_second_generation"] == 0

