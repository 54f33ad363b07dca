"""L3 sees a graph-count regression: with the prompt-padding fix switched off, prompts that leave
different remainders of the prefill chunk compile a new graph each, and L3 fails on the count."""

import pytest

from hf_neuron.transformers.generation.chunked_prefill import PAD_FIX

from compat_helpers import cli_main, records


def _l3(tmp_path, name):
    out = tmp_path / f"{name}.json"
    rc = cli_main(["compat", "--no-progress", "--device", "neuron", "--arch", "qwen3", "--levels", "L1,L2,L3",
                   "--check", "--output", str(out)])
    return rc, records(out)["qwen3"]


@pytest.mark.slow
def test_l3_passes_compiled_and_fails_on_graph_count_without_prompt_padding(tmp_path, monkeypatch):
    rc, rec = _l3(tmp_path, "fixed")
    assert rc == 0 and rec["levels"]["L3"] == "pass", rec["failure"]
    details = rec["details"]["L3"]
    assert details["path"] == "compiled"
    assert details["graphs_per_batch"] == {"1": 2, "2": 2}
    assert all(run["tokens"] == run["cpu_tokens"] for run in details["runs"])
    assert {len(run["prompt_lengths"]) for run in details["runs"]} == {1, 2}

    monkeypatch.setenv("HF_NEURON_DISABLE", PAD_FIX)  # the worker processes start without the fix
    rc, rec = _l3(tmp_path, "unfixed")
    assert rc == 1 and rec["levels"]["L3"] == "fail"
    assert "graphs at batch 1" in rec["failure"]["reason"], rec["failure"]
    assert rec["details"]["L3"]["graphs_per_batch"]["1"] > 2
