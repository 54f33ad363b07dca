"""HF_NEURON_DISABLE=1 leaves Transformers untouched (no fix applied, upstream objects in place)."""

import os
import subprocess
import sys

CODE = """
import transformers.generation.utils, transformers.cache_utils, transformers.modeling_utils
from transformers.cache_utils import StaticSlidingWindowLayer
from transformers.generation.utils import GenerationMixin
from hf_neuron import patching as fixes
from hf_neuron.transformers import import_fix_targets
import_fix_targets()
patched = [
    getattr(StaticSlidingWindowLayer.update, "__hf_neuron_fix__", None),
    getattr(GenerationMixin._prefill, "__hf_neuron_fix__", None),
    getattr(transformers.modeling_utils.check_and_set_device_map, "__hf_neuron_fix__", None),
]
declared = [f for f in fixes.all_fixes() if f.library == "transformers"]
print("PATCHED", sum(p is not None for p in patched), "ACTIVE", sum(f.active for f in declared),
      "CLOSED", sum(f.status == fixes.CLOSED for f in declared), "DECLARED", len(declared))
"""


def _run(disable: str) -> dict[str, int]:
    env = dict(os.environ, HF_NEURON_DISABLE=disable, HF_NEURON_SIMULATOR="1")
    result = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    words = result.stdout.strip().splitlines()[-1].split()
    return {name: int(count) for name, count in zip(words[::2], words[1::2])}


def test_disable_leaves_upstream_untouched():
    counts = _run("1")
    assert counts["DECLARED"] > 0
    assert counts["PATCHED"] == 0 and counts["ACTIVE"] == 0


def test_enabled_by_default():
    # Every Transformers fix is decided on the installed (verified) release: applied where its gap
    # exists, closed where upstream closes it, none unknown; the opt-out declares exactly the same
    # fixes (it only skips applying them).
    counts = _run("0")
    assert counts["PATCHED"] == 3 and counts["ACTIVE"] > 0
    assert counts["ACTIVE"] + counts["CLOSED"] == counts["DECLARED"] == _run("1")["DECLARED"]
