"""Tiny pipelines per family on the neuron device (text encoder on CPU) equal CPU: eager, with the
transformer's repeated blocks compiled, and with the VAE decode compiled too (one graph per latent shape)."""

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
    assert record["vae_compiled_max_abs_diff"] <= 1e-4
    assert record["vae_decode_graphs"] == 1
    assert record["vae_decode_graphs_second_generation"] == 0


def test_at_least_a_dozen_pipeline_families():
    assert len(FAMILIES) >= 12
    assert {"qwenimage", "qwenimage21", "flux", "flux2", "sd3", "wan", "ltx", "hunyuanvideo", "sana", "cogview4",
            "pixart", "chroma"} <= set(FAMILIES)

