"""wrap / replace record the upstream original; upstream_behaviour puts it back for a block."""

import types

import pytest

from hf_neuron.patching import attributes
from hf_neuron.patching.attributes import is_patched, original, replace, upstream_behaviour, wrap


class Base:
    def greet(self, name):
        return f"hello {name}"


def _fresh_class():
    class Child(Base):
        def size(self):
            return 1

    return Child


def _fresh_module():
    module = types.ModuleType("hfn_fake_upstream")

    def double(x):
        return 2 * x

    module.double = double
    return module


def test_wrappers_chain_in_registration_order_and_come_off_per_name():
    module = _fresh_module()
    upstream = module.double
    wrap("test.plus_one", module, "double", lambda inner, x: inner(x) + 1)
    wrap("test.times_ten", module, "double", lambda inner, x: inner(x) * 10)
    wrap("test.plus_one", module, "double", lambda inner, x: inner(x) + 1000)  # same name: no second wrapper
    assert module.double(3) == (2 * 3 + 1) * 10
    assert original(module, "double") is upstream and is_patched(module, "double", "test.plus_one")
    with upstream_behaviour("test.times_ten"):
        assert module.double(3) == 7
    with upstream_behaviour("test.plus_one", "test.times_ten"):
        assert module.double is upstream
    assert module.double(3) == 70


def test_a_reference_taken_before_the_switch_follows_it():
    module = _fresh_module()
    wrap("test.negate", module, "double", lambda inner, x: -inner(x))
    taken = module.double  # as `from upstream import double` would
    with upstream_behaviour("test.negate"):
        assert taken(2) == 4
    assert taken(2) == -4


def test_an_inherited_method_is_wrapped_on_the_class_and_restored_by_deleting_ours():
    cls = _fresh_class()
    wrap("test.shout", cls, "greet", lambda inner, self, name: inner(self, name).upper())
    assert cls().greet("neuron") == "HELLO NEURON" and "greet" in vars(cls)
    assert Base().greet("cpu") == "hello cpu"  # the base class is untouched
    with upstream_behaviour("test.shout"):
        assert "greet" not in vars(cls) and cls().greet("neuron") == "hello neuron"
    assert cls().greet("neuron") == "HELLO NEURON"


def test_a_classmethod_stays_one_and_its_subclasses_get_the_wrapper():
    class Loader:
        @classmethod
        def load(cls, name, option=None):
            return cls.__name__, name, option

    class Child(Loader):
        pass

    def default_option(inner, cls, name, **kwargs):
        kwargs.setdefault("option", "ours")
        return inner(cls, name, **kwargs)

    wrap("test.default_option", Loader, "load", default_option)
    assert isinstance(vars(Loader)["load"], classmethod)
    assert Child.load("x") == ("Child", "x", "ours")
    assert Child.load("x", option="yours") == ("Child", "x", "yours")
    with upstream_behaviour("test.default_option"):
        assert Child.load("x") == ("Child", "x", None)


def test_replace_sets_attributes_and_mapping_entries():
    cls = _fresh_class()
    table = {"kept": 1}
    replace("test.plan", cls, "_plan", {"layers.*": "colwise"})
    replace("test.plan", table, "added", 2, mapping=True)
    assert cls._plan == {"layers.*": "colwise"} and table == {"kept": 1, "added": 2}
    with upstream_behaviour("test.plan"):
        assert not hasattr(cls, "_plan") and table == {"kept": 1}
    assert table["added"] == 2


def test_wrapping_what_does_not_exist_fails_loudly():
    module = types.ModuleType("hfn_empty")
    with pytest.raises(AttributeError):
        wrap("test.missing", module, "nothing", lambda inner: inner())


def test_upstream_behaviour_without_names_switches_off_fixes_but_not_the_device():
    import torch._tensor_str as tensor_str

    from hf_neuron.simulator import is_simulated

    if not is_simulated():
        pytest.skip("the simulated device is what this checks")
    assert is_patched(tensor_str, "_str", "simulator.quiet_tensor_printing")
    with upstream_behaviour():
        assert "simulator.quiet_tensor_printing" not in attributes._disabled
