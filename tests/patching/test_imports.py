"""Post-import hooks: a callback gets a module whose body has run to the end, never before."""

import sys

from hf_neuron.patching.imports import deliver_finished, is_imported, when_imported

# A module that registers a callback for itself while its body runs (as the adapters are wired
# from `import torch`, which a library module may be the one running), then defines more.
PROBE = """
from hf_neuron.patching.imports import when_imported
seen = []
when_imported(__name__, lambda module: seen.append(hasattr(module, "DEFINED_LATER")))
DEFINED_LATER = 1
"""


def test_callback_runs_after_import(scratch_modules):
    scratch_modules("hfn_fake_lib.py", "VALUE = 41\n")
    seen = []
    when_imported("hfn_fake_lib", lambda m: seen.append(m.VALUE + 1))
    assert seen == []
    import hfn_fake_lib  # noqa: F401

    assert seen == [42]


def test_callback_runs_at_once_for_an_imported_module():
    seen = []
    when_imported("json", lambda m: seen.append(m.__name__))
    assert seen == ["json"] and is_imported("json")


def test_a_module_registering_during_its_own_body_is_handed_over_complete(scratch_modules):
    scratch_modules("hfn_probe_body.py", PROBE)
    import hfn_probe_body

    assert hfn_probe_body.seen == []  # deferred: the body was still running at registration
    scratch_modules("hfn_probe_next.py", "X = 1\n")
    import hfn_probe_next  # noqa: F401  (any later import delivers it)

    assert hfn_probe_body.seen == [True]


def test_deferred_callbacks_can_be_delivered_explicitly(scratch_modules):
    scratch_modules("hfn_probe_explicit.py", PROBE)
    import hfn_probe_explicit

    deliver_finished()
    assert hfn_probe_explicit.seen == [True]
    deliver_finished()
    assert hfn_probe_explicit.seen == [True]  # once


def test_a_failed_import_delivers_nothing(scratch_modules):
    scratch_modules("hfn_probe_fails.py", PROBE + "raise RuntimeError('broken module')\n")
    try:
        import hfn_probe_fails  # noqa: F401
    except RuntimeError:
        pass
    deliver_finished()
    assert "hfn_probe_fails" not in sys.modules


def test_a_submodule_is_handed_over_when_its_import_binds_it_on_the_package(scratch_modules):
    """No later import needed: `from trl import SFTConfig` must get the patched class at once."""
    scratch_modules("hfn_probe_pkg/__init__.py", "")
    scratch_modules("hfn_probe_pkg/config.py", PROBE)
    import hfn_probe_pkg

    package_class = type(hfn_probe_pkg)
    from hfn_probe_pkg import config

    assert config.seen == [True]
    assert type(hfn_probe_pkg) is package_class  # the package's class is given back
