"""An embedding whose weight the model's own forward reads (Gemma 4), or whose class normalises its own
lookup (Muse Glimmer, Inkling), stays whole under tensor parallelism, so TP=2 equals one device; other
models keep Transformers' vocabulary-parallel embedding."""

from __future__ import annotations

import pytest
from transformers import DistributedConfig

from hf_neuron.patching import upstream_behaviour
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers.tensor_parallel.embeddings import POSTPROCESSED_EMBEDDING_FIX, READ_EMBEDDING_FIX

EMBEDDING, HEAD = "model.language_model.embed_tokens", "lm_head"


def _plan(model, **config):
    return model._resolve_parallel_plans(DistributedConfig(tp_size=2, **config))[0]


def test_read_embedding_and_its_tied_head_are_replicated():
    plan = _plan(build_model("gemma4"))
    assert (plan[EMBEDDING], plan[HEAD]) == ("replicate", "replicate")
    assert _plan(build_model("llama"))["model.embed_tokens"] == "embedding_rowwise"


def test_a_style_the_user_chooses_is_kept():
    model = build_model("gemma4")
    plan = _plan(model, tp_plan={**model.tp_plan, EMBEDDING: "embedding_rowwise", HEAD: "colwise_gather_output"})
    assert (plan[EMBEDDING], plan[HEAD]) == ("embedding_rowwise", "colwise_gather_output")


@pytest.mark.distributed
def test_gemma4_tp2_equals_one_device_only_with_the_fix(tp2_only_with_the_fix):
    record = tp2_only_with_the_fix("gemma4", READ_EMBEDDING_FIX, r"mixed torch\.Tensor and DTensor")
    assert record["details"]["max_abs_diff"] <= 1e-4


def test_an_embedding_that_normalises_its_lookup_is_replicated():
    model = build_model("muse_glimmer")
    embedding = next(name for name, style in model.tp_plan.items() if name.endswith("embed_tokens"))
    assert _plan(model)[embedding] == "replicate"
    with upstream_behaviour(POSTPROCESSED_EMBEDDING_FIX):
        assert _plan(build_model("muse_glimmer"))[embedding] == "embedding_rowwise"
    # A scaled lookup is linear: Gemma 3's stays vocabulary-sharded.
    assert _plan(build_model("gemma3_text"))["model.embed_tokens"] == "embedding_rowwise"


@pytest.mark.distributed
def test_muse_glimmer_tp2_equals_one_device_only_with_the_fix(tp2_only_with_the_fix):
    tp2_only_with_the_fix("muse_glimmer", POSTPROCESSED_EMBEDDING_FIX, "^AssertionError")
