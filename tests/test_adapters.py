"""Gated activation: a process without a neuron device is left exactly as released.

One subprocess with the simulated device imports every module a fix changes and records each
changed attribute with its upstream original; a second one, without a device, imports the same
modules and must find every one of those attributes equal to the original, no hf_neuron module
but the entry point loaded, no import hook installed, and nothing more printed than with
``HF_NEURON_DISABLE=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

FINGERPRINT = textwrap.dedent(
    """
    import types

    def describe_owner(owner):
        if isinstance(owner, types.ModuleType):
            return ["module", owner.__name__]
        if isinstance(owner, type):
            return ["class", owner.__module__, owner.__qualname__]
        return None  # a mapping or a field object: not addressable from another process

    def resolve_owner(path):
        import importlib
        module = importlib.import_module(path[1])
        if path[0] == "module":
            return module
        owner = module
        for part in path[2].split("."):
            owner = getattr(owner, part)
        return owner

    def fingerprint(value, inherited=False):
        if inherited:
            return "<inherited>"
        for kind in (staticmethod, classmethod):
            if isinstance(value, kind):
                value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if callable(value) and hasattr(value, "__qualname__"):
            return [getattr(value, "__module__", None), value.__qualname__, hasattr(value, "__hf_neuron_fix__")]
        return repr(value)[:300]
    """
)

WITH_DEVICE = FINGERPRINT + textwrap.dedent(
    """
    import importlib, json, sys
    import torch, transformers, trl, diffusers, peft
    from hf_neuron.patching import attributes, import_targets, registry
    from hf_neuron.trl._common import BASE_TRAINER_MODULE, CONFIG_CLASSES, TRAINER_MODULES, UTILS_MODULE
    from hf_neuron.diffusers.plan_registry import PLANS
    from hf_neuron.diffusers.repeated_blocks import REPEATED_BLOCKS
    from hf_neuron.diffusers.tensor_parallel import TP_HOOKS_MODULE

    modules = sorted({f.waits_for for f in registry.all_fixes() if f.waits_for})
    modules += [*CONFIG_CLASSES, *TRAINER_MODULES, BASE_TRAINER_MODULE, UTILS_MODULE, TP_HOOKS_MODULE]
    modules += [plan.module_path for plan in PLANS.values()]
    modules += ["diffusers.models.transformers." + module for module, _ in REPEATED_BLOCKS.values()]
    for name in modules:
        importlib.import_module(name)
    for library in ("transformers", "trl", "diffusers", "peft"):
        import_targets(library)
    sites = []
    for owner, attr, mapping, original, inherited in attributes.patched_sites():
        path = None if mapping else describe_owner(owner)
        if path is None:
            continue
        sites.append({"owner": path, "attr": attr, "original": fingerprint(original, inherited),
                      "patched": fingerprint(getattr(owner, attr), False)})
    active = [f.name for f in registry.all_fixes() if f.active]
    from hf_neuron.simulator.distributed import neuron_allocations
    print("RESULT " + json.dumps({"modules": modules, "sites": sites, "active": active,
                                  "allocations": neuron_allocations()}))
    """
)

WITHOUT_DEVICE = FINGERPRINT + textwrap.dedent(
    """
    import importlib, json, sys
    request = json.loads(sys.argv[1])
    import torch, transformers, trl, diffusers, peft
    for name in request["modules"]:
        importlib.import_module(name)
    current = []
    for site in request["sites"]:
        owner = resolve_owner(site["owner"])
        inherited = isinstance(owner, type) and site["attr"] not in vars(owner)
        current.append(fingerprint(getattr(owner, site["attr"], None), inherited))
    print("RESULT " + json.dumps({
        "current": current,
        "hf_neuron_modules": sorted(m for m in sys.modules if m.startswith("hf_neuron")),
        "finders": [type(f).__module__ for f in sys.meta_path],
        "module_classes": sorted({type(m).__module__ for m in list(sys.modules.values()) if m is not None}),
    }))
    """
)


def _run(code: str, *args: str, **env: str) -> tuple[dict, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("HF_NEURON_", "NEURON_"))}
    environment.update(env, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc.stderr


@pytest.mark.slow
def test_without_a_neuron_device_every_patched_attribute_is_upstream():
    device, _ = _run(WITH_DEVICE, HF_NEURON_SIMULATOR="1")
    # Deciding every fix created no tensor on the device: on Trainium that initialises the Neuron
    # runtime, after which the user's init_process_group(backend="neuron") is refused.
    assert device["allocations"] == 0
    sites = device["sites"]
    assert len(device["active"]) >= 20 and len(sites) >= 30, (device["active"], len(sites))
    assert all(site["patched"] != site["original"] for site in sites)  # the comparison can fail

    request = json.dumps({"modules": device["modules"], "sites": sites})
    bare, bare_stderr = _run(WITHOUT_DEVICE, request, HF_NEURON_SIMULATOR="0")
    changed = [
        (site["owner"], site["attr"], now) for site, now in zip(sites, bare["current"]) if now != site["original"]
    ]
    assert changed == []
    # The entry point asked whether a real torch-neuronx is installed, and nothing else.
    assert bare["hf_neuron_modules"] == ["hf_neuron", "hf_neuron._autoload", "hf_neuron.simulator",
                                         "hf_neuron.simulator.activation"]
    assert not any(f.startswith("hf_neuron") for f in bare["finders"])
    assert not any(m.startswith("hf_neuron") for m in bare["module_classes"])

    _, disabled_stderr = _run(WITHOUT_DEVICE, request, HF_NEURON_SIMULATOR="0", HF_NEURON_DISABLE="1")
    assert bare_stderr == disabled_stderr  # nothing printed by hf_neuron


TRANSFORMERS_FIX_STATUS = textwrap.dedent(
    """
    import json
    from hf_neuron.transformers import import_fix_targets
    import_fix_targets()
    from hf_neuron.patching import all_fixes
    print("RESULT " + json.dumps({f.name: f.status for f in all_fixes() if f.library == "transformers"}))
    """
)
ADAPTER_IMPORTED_FIRST = (
    # imports no torch yet: the adapter's own import does, and torch's device autoload activates the
    # adapter inside that import
    "import transformers\n" + TRANSFORMERS_FIX_STATUS
)


def test_the_adapter_imported_before_torch_still_applies_its_fixes():
    first, _ = _run(ADAPTER_IMPORTED_FIRST, HF_NEURON_SIMULATOR="1")
    usual, _ = _run("import torch\n" + TRANSFORMERS_FIX_STATUS, HF_NEURON_SIMULATOR="1")
    assert first == usual
    assert set(first.values()) <= {"applied", "closed"}, first
    assert "applied" in first.values()
