"""The recipe ``compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)`` on the simulated device.

Graphs are counted through the simulator's graph log: one per distinct block structure and input
shape at the first denoising step, none after (no recompiles across steps), outputs equal to CPU.
The full sweep over every tiny class is a step of ``hf-neuron compat diffusers`` (see
compatibility/diffusers.md); CI checks one class with upstream's ``_repeated_blocks``, two with ours,
and the sharded (TP=2) + compiled combination of the announcement's recipe.
"""

from __future__ import annotations

import diffusers  # noqa: F401
import pytest

from hf_neuron.compat.diffusers.compile_check import check_class

from diffusers_adapter_helpers import load_records, run_torchrun

# class -> graphs expected at the first step
EXPECTED_GRAPHS = {
    "ChromaTransformer2DModel": 2,  # upstream _repeated_blocks: dual + single-stream block
    "AuraFlowTransformer2DModel": 2,  # ours: joint + single block
    "CogView4Transformer2DModel": 1,  # ours
}


@pytest.mark.parametrize("class_name", sorted(EXPECTED_GRAPHS))
def test_one_graph_per_block_no_recompiles(class_name):
    record = check_class(class_name)
    assert record["ok"], record.get("traceback", record)
    assert record["graphs_first_step"] == EXPECTED_GRAPHS[class_name] == len(record["block_classes"])
    assert record["graphs_later_steps"] == 0
    assert record["max_abs_diff"] <= 1e-5


@pytest.mark.distributed
def test_sharded_and_compiled(tmp_path):
    out = tmp_path / "tp_compiled.json"
    run_torchrun("hf_neuron.compat.diffusers.tp_check", "--device", "neuron", "--modes", "memory,compiled",
                 "--classes", "ChromaTransformer2DModel,AuraFlowTransformer2DModel", "--out", str(out))
    for name, record in load_records(out).items():
        assert record["ok"], record
        assert record["compiled"]["graphs_first_step"] == EXPECTED_GRAPHS[name]
        assert record["compiled"]["graphs_later_steps"] == 0
