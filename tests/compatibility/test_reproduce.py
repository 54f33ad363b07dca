"""A real architecture end to end through the worker, and the committed results reproduced with --arch."""

import pytest

from hf_neuron.compat import archs
from hf_neuron.compat import results as R
from hf_neuron.compat.paths import COMMITTED_RESULTS_DIR
from hf_neuron.compat.runner import real_torch_neuronx

from compat_helpers import cli_main, records

REPRODUCED = ("llama",)


def _device() -> str:
    try:
        import hf_neuron.simulator  # noqa: F401
    except ImportError:
        return "cpu"
    return "neuron"


@pytest.mark.slow
def test_llama_runs_and_reproduces_the_committed_results(tmp_path):
    device = _device()
    out = tmp_path / "r.json"
    rc = cli_main(["compat", "--no-progress", "--device", device, "--arch", ",".join(REPRODUCED),
                   "--levels", "L1,L2,L3", "--output", str(out)])
    assert rc == 0
    rec = records(out)["llama"]
    assert rec["levels"]["L1"] == rec["levels"]["L2"] == rec["levels"]["L3"] == "pass", rec["failure"]
    runs = rec["details"]["L3"]["runs"]
    assert runs and all(run["tokens"] == run["cpu_tokens"] for run in runs)
    assert rec["details"]["L2"]["max_abs_diff"] <= 1e-4

    if device == "cpu" or real_torch_neuronx():
        pytest.skip("the committed results are the simulated device's")
    committed = COMMITTED_RESULTS_DIR / R.results_filename(R.load(out)["transformers_version"], "simulated")
    # Every Transformers release in the declared range has its committed table.
    assert committed.exists(), (
        f"no committed results for the installed Transformers ({committed.name}): "
        "run `HF_NEURON_SIMULATOR=1 hf-neuron compat` and commit the file"
    )
    old = R.by_model_type(R.load(committed)).get("llama")
    if old is None:
        pytest.skip("llama not in the committed results")
    for lv in ("L1", "L2", "L3"):
        assert rec["levels"][lv] == old["levels"][lv]
    assert [run["tokens"] for run in runs] == [run["tokens"] for run in old["details"]["L3"]["runs"]]
    assert rec["graphs_compiled"]["L3"] == old["graphs_compiled"]["L3"]


def test_remote_code_entry_is_recorded_as_not_testable(tmp_path):
    out = tmp_path / "r.json"
    assert cli_main(["compat", "--no-progress", "--device", "cpu", "--arch", "kimi_k2", "--output", str(out)]) == 0
    rec = records(out)["kimi_k2"]
    assert rec["rank"] == 36 and rec["kind"] == archs.KIND_REMOTE_CODE
    assert set(rec["levels"].values()) == {"skip"}
    assert "remote code" in rec["skip_reasons"]["L1"]
    assert rec["failure"] is None
    assert R.summarize(R.load(out))["headline"] == 0  # in the denominator, never a pass
