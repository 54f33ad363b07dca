"""Models on Neuron with ``kernels`` installed: a compiled SFT step with activation checkpointing compiles its
decoder layers whole, and loading keeps the forwards tensor-parallel styles install.

Each SFT step runs in a fresh process: the fix acts when the modeling module defines its attention class.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import transformers.integrations.hub_kernels  # noqa: F401  (decides the fix in this process)
from transformers import AutoModelForCausalLM, PreTrainedModel

from hf_neuron.patching import get_fix
from hf_neuron.transformers.loading.hub_kernels import LOAD_FIX, ROUTING_FIX

pytestmark = [pytest.mark.slow]

STEP = """
import json
from torch._dynamo.utils import counters
from hf_neuron.transformers.plan import sft_step_graphs
graphs = sft_step_graphs("llama")
print("RESULT " + json.dumps({"graphs": graphs, "breaks": list(counters["graph_break"])}))
"""

#: What Dynamo says when a checkpointed layer writes state outside it (then the layer runs eagerly).
SIDE_EFFECT_BREAK = "Mutating a variable from outside the scope of this HOP"


def _step(**env) -> dict:
    environment = {**os.environ, "HF_NEURON_SIMULATOR": "1", **env}
    result = subprocess.run([sys.executable, "-c", STEP], env=environment, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _falls_back(step: dict) -> bool:
    return any(SIDE_EFFECT_BREAK in reason for reason in step["breaks"])


def test_checkpointed_layers_compile_whole():
    step = _step()
    assert not _falls_back(step), step["breaks"]
    upstream = _step(HF_NEURON_DISABLE=ROUTING_FIX)
    if get_fix(ROUTING_FIX).active:
        # the installed Transformers routes kernels through every attention forward
        assert _falls_back(upstream) and upstream["graphs"] > step["graphs"], upstream
    else:
        assert not _falls_back(upstream) and upstream["graphs"] == step["graphs"], upstream


def test_loading_kernelizes_only_when_asked(tiny_llama_dir, monkeypatch):
    asked = []
    monkeypatch.setattr(PreTrainedModel, "set_use_kernels", lambda self, use_kernels, *a, **k: asked.append(use_kernels))
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir, device_map="neuron")
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir, device_map="neuron", use_kernels=True)  # yours wins
    assert asked == [False, True]


@pytest.mark.distributed
def test_bitnet_tp2_equals_one_device_without_kernelizing_at_load(tp2_only_with_the_fix, tp2_record, tmp_path):
    if get_fix(LOAD_FIX).active:
        # kernelizing gives BitNet's sharded sub-norms their class's forward back
        tp2_only_with_the_fix("bitnet", LOAD_FIX, "mixed torch.Tensor and DTensor")
    else:
        from hf_neuron.tiny_models import save_tiny_model

        record = tp2_record("bitnet", save_tiny_model("bitnet", tmp_path / "bitnet", seed=0))
        assert record["ok"], record["reason"]
