"""hf_neuron's tensor-parallel styles accept the keywords Transformers' sharding code passes, today's and
tomorrow's.

Transformers 5.25 started passing ``config=`` and ``mesh_manager=`` to every style's ``shard_param`` and
``install_forward``; a style whose methods named only the arguments of 5.24 failed with a TypeError for
every model whose plan uses one (GPT-2, MPT, GPT-BigCode, Falcon, BitNet, the Mamba family, RWKV). The
TP=2 runs of those models (``test_model_tp_plans.py``) prove the styles on the installed release; this
test proves the next keyword Transformers adds is no crash either.
"""

from __future__ import annotations

import inspect

import pytest

from hf_neuron.transformers.tensor_parallel.styles import build_styles

STYLES = build_styles()

#: How Transformers' sharding code calls each method (positional arguments), plus a keyword no release
#: passes yet.
CALLS = {
    "shard_param": ("module", "param", "mesh"),
    "install_forward": ("module", "mesh"),
    "transform_inputs_pre_forward": ("module", "args", "kwargs", "mesh"),
}
KEYWORDS = {"config": None, "mesh_manager": None, "a_keyword_of_a_later_release": 1}


def _own_methods(style):
    """The methods of CALLS that hf_neuron's style class (not upstream's base) defines."""
    for name in CALLS:
        for klass in type(style).__mro__:
            if name in vars(klass):
                if klass.__module__ == "hf_neuron.transformers.tensor_parallel.styles":
                    yield name, getattr(style, name)
                break


@pytest.mark.parametrize("style_name", sorted(STYLES))
def test_style_methods_accept_keywords_they_do_not_use(style_name):
    methods = dict(_own_methods(STYLES[style_name]))
    assert methods, f"{style_name} overrides none of {sorted(CALLS)}"
    for name, method in methods.items():
        # bind() raises TypeError exactly where the call would
        inspect.signature(method).bind(*CALLS[name], **KEYWORDS)
