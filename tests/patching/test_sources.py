"""Reading upstream source without importing it."""

import dataclasses
import sys

from hf_neuron.patching.sources import class_assigns, class_field_default, function_mentions, module_path

SOURCE = '''
import dataclasses

class Model:
    _tp_plan = None
    _repeated_blocks = ["Block"]
    _no_split: list = []

@dataclasses.dataclass
class Config:
    pad_to_multiple_of: int | None = None
    packing: bool = dataclasses.field(default=True, metadata={"help": "pack"})
    max_length: int = dataclasses.field(default_factory=lambda: 7)
    name: str

def load(model_id):
    return "neuron:" + model_id
'''


def test_source_facts_without_importing(scratch_modules):
    scratch_modules("hfn_src_pkg/__init__.py", "raise RuntimeError('importing the package is not allowed')\n")
    models = scratch_modules("hfn_src_pkg/models.py", SOURCE)
    name = "hfn_src_pkg.models"

    assert module_path(name) == models
    assert class_assigns(name, "Model", "_tp_plan") is False
    assert class_assigns(name, "Model", "_repeated_blocks") is True
    assert class_assigns(name, "Model", "_no_split") is False
    assert class_assigns(name, "Model", "_absent") is False
    assert class_assigns(name, "Missing", "_tp_plan") is None
    assert class_field_default(name, "Config", "pad_to_multiple_of") is None
    assert class_field_default(name, "Config", "packing") is True
    assert class_field_default(name, "Config", "max_length") is ...
    assert class_field_default(name, "Config", "name") is dataclasses.MISSING
    assert function_mentions(name, "load", "neuron") is True
    assert function_mentions(name, "missing", "neuron") is None
    assert "hfn_src_pkg" not in sys.modules
