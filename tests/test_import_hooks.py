"""Post-import hooks: adapters run when their library is imported, not before."""

import sys

from hf_neuron._import_hooks import when_imported


def test_callback_runs_after_import(tmp_path, monkeypatch):
    (tmp_path / "hf_neuron_fake_lib.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("hf_neuron_fake_lib", lambda m: seen.append(m.VALUE + 1))
    assert seen == []
    import hf_neuron_fake_lib  # noqa: F401

    assert seen == [42]
    sys.modules.pop("hf_neuron_fake_lib")


def test_callback_runs_at_once_for_an_imported_module():
    seen = []
    when_imported("json", lambda m: seen.append(m.__name__))
    assert seen == ["json"]
