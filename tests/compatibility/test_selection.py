"""Which architectures a run covers; bad input fails before anything is written."""

import pytest

from hf_neuron.compat import archs

from compat_helpers import run_compat


def test_ranked_list_is_the_top_100_with_its_untestable_entries():
    specs = archs.select()
    assert [s.rank for s in specs] == list(range(1, 101))
    kinds = {s.model_type: s.kind for s in specs}
    assert kinds["kimi_k2"] == archs.KIND_REMOTE_CODE
    assert {n for n, k in kinds.items() if k == archs.KIND_MULTIMODAL} == {"kimi_k25", "mistral3", "muse_glimmer", "mistral4"}


def test_all_adds_every_causal_lm_type():
    specs = archs.select(all_archs=True)
    names = {s.model_type for s in specs}
    assert set(archs.causal_lm_model_types()) <= names
    assert {s.model_type for s in specs if s.rank} == {s.model_type for s in archs.load_ranking()}
    assert specs[0].rank == 1 and specs[-1].rank is None


def test_quick_and_arch():
    assert [s.model_type for s in archs.select(quick=True)] == ["qwen3", "llama", "gpt2", "mistral", "qwen3_moe"]
    chosen = archs.select(arch_names=["gpt2", "llama", "codegen", "xglm"])
    assert [s.model_type for s in chosen] == ["llama", "gpt2", "codegen", "xglm"]
    assert chosen[-1].rank is None


def test_unknown_architecture_is_a_clear_error_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_compat("--arch", "llama,not_a_model", "--output", out) == 2
    err = capsys.readouterr().err
    assert "unknown architecture(s): not_a_model" in err
    assert not out.exists()


def test_bad_levels_are_rejected(tmp_path, capsys):
    assert run_compat("--arch", "llama", "--levels", "L1,L9", "--output", tmp_path / "r.json") == 2
    assert "--levels" in capsys.readouterr().err


def test_test_architectures_need_the_switch(monkeypatch):
    monkeypatch.delenv("HF_NEURON_COMPAT_TEST_ARCHS", raising=False)
    with pytest.raises(ValueError, match="unknown architecture"):
        archs.select(arch_names=["_test_pass"])
