"""A per-class diffusers fix sets its attribute only while upstream's is empty, and comes off cleanly."""

import importlib

import pytest

from hf_neuron.patching.class_attributes import supply_class_attribute
from hf_neuron.patching import APPLIED, CLOSED, apply_fixes, get_fix, upstream_behaviour
from hf_neuron.patching.registry import scratch_registry

MODULE = """
class Base:
    _tp_plan = None

class Empty(Base):
    pass

class Shipped(Base):
    _tp_plan = {"blocks.*.to_q": "colwise"}

class Inherits(Shipped):
    pass
"""


@pytest.fixture
def fake_models(scratch_modules, monkeypatch, request):
    """A module of model classes, under a name of its own per test (import hooks outlive a test)."""
    monkeypatch.delenv("HF_NEURON_DISABLE", raising=False)
    name = f"hfn_fake_models_{request.node.name}"
    scratch_modules(f"{name}.py", MODULE)
    with scratch_registry():
        yield name


def _declare(module: str, class_name: str, installed: list) -> None:
    supply_class_attribute(f"test.plan.{class_name}", module, class_name, "_tp_plan",
                           lambda: {"blocks.*.to_q": "rowwise"}, f"{class_name} has no plan.", installed.append)


def test_an_empty_attribute_gets_ours_and_upstream_behaviour_takes_it_off(fake_models):
    installed = []
    _declare(fake_models, "Empty", installed)
    apply_fixes("diffusers")
    hfn_fake_models = importlib.import_module(fake_models)

    assert hfn_fake_models.Empty._tp_plan == {"blocks.*.to_q": "rowwise"} and installed
    assert get_fix("test.plan.Empty").status == APPLIED
    assert hfn_fake_models.Base._tp_plan is None  # the base class is untouched
    with upstream_behaviour("test.plan.Empty"):
        assert hfn_fake_models.Empty._tp_plan is None


def test_a_value_upstream_ships_wins(fake_models):
    installed = []
    _declare(fake_models, "Shipped", installed)
    apply_fixes("diffusers")
    hfn_fake_models = importlib.import_module(fake_models)

    # The class body assigns a plan: detection closes the fix before the module is even imported.
    assert get_fix("test.plan.Shipped").status == CLOSED
    assert hfn_fake_models.Shipped._tp_plan == {"blocks.*.to_q": "colwise"} and installed == []


def test_a_value_inherited_from_upstream_is_seen_on_import(fake_models):
    installed = []
    _declare(fake_models, "Inherits", installed)
    apply_fixes("diffusers")
    assert get_fix("test.plan.Inherits").status != CLOSED  # its own body assigns nothing
    hfn_fake_models = importlib.import_module(fake_models)

    assert get_fix("test.plan.Inherits").status == CLOSED and installed == []
    assert hfn_fake_models.Inherits._tp_plan == {"blocks.*.to_q": "colwise"}


def test_a_module_imported_before_the_fix_is_decided_at_once(fake_models):
    hfn_fake_models = importlib.import_module(fake_models)

    installed = []
    _declare(fake_models, "Inherits", installed)
    _declare(fake_models, "Empty", installed)
    apply_fixes("diffusers")
    assert get_fix("test.plan.Inherits").status == CLOSED
    assert get_fix("test.plan.Empty").status == APPLIED and len(installed) == 1
    assert hfn_fake_models.Empty._tp_plan == {"blocks.*.to_q": "rowwise"}
