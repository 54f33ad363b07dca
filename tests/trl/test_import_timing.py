"""The TRL adapter patches a module only once its body has run, even when it is activated from inside
that module's import (``from trl import SFTConfig`` imports torch from ``trl.trainer.sft_config``)."""

from __future__ import annotations

import sys

from hf_neuron.trl._common import when_ready

PROBE = """
import {register} as _register
seen = []
_register.{function}(__name__, lambda module: seen.append(hasattr(module, "DEFINED_LATER")))
DEFINED_LATER = 1
"""


def _import_probe(tmp_path, monkeypatch, name: str, function: str):
    module_name, function_name = function.rsplit(".", 1)
    (tmp_path / f"{name}.py").write_text(PROBE.format(register=module_name, function=function_name))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    __import__(name)
    return sys.modules[name]


def test_callback_waits_for_the_module_body(tmp_path, monkeypatch):
    module = _import_probe(tmp_path, monkeypatch, "hfn_probe_ready", "hf_neuron.trl._common.when_ready")
    assert module.seen == [True]
    assert type(module.__spec__).__name__ == "ModuleSpec"  # the spec is left as it was


def test_plain_post_import_hook_sees_a_partial_module(tmp_path, monkeypatch):
    """The gap: registering while the module runs hands over the module before its classes exist."""
    module = _import_probe(tmp_path, monkeypatch, "hfn_probe_plain", "hf_neuron._import_hooks.when_imported")
    assert module.seen == [False]


def test_already_imported_module_is_handed_over_at_once():
    seen = []
    when_ready("json", seen.append)
    assert seen == [sys.modules["json"]]
