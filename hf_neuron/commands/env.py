"""`hf-neuron env`: versions, neuron devices and the adapters' fixes, for bug reports."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import platform

LIBRARIES = ["torch", "transformers", "diffusers", "trl", "peft", "accelerate", "datasets", "tokenizers"]


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def collect() -> dict:
    import torch

    from hf_neuron import __version__, fixes
    from hf_neuron.simulator import is_simulated, real_torch_neuronx_installed

    info: dict = {"hf_neuron": __version__, "python": platform.python_version(), "platform": platform.platform()}
    info["versions"] = {name: _version(name) for name in LIBRARIES}
    if is_simulated():
        from hf_neuron.simulator.torch_neuronx_shim import SIMULATED_VERSION

        info["torch_neuronx"] = f"{SIMULATED_VERSION} (SIMULATED by hf_neuron: host memory + CPU kernels)"
    elif real_torch_neuronx_installed():
        info["torch_neuronx"] = f"{_version('torch-neuronx')} (real)"
    else:
        info["torch_neuronx"] = "not installed (set HF_NEURON_SIMULATOR=1 for the simulated device)"
    devices = []
    if hasattr(torch, "neuron") and torch.neuron.is_available():
        for i in range(torch.neuron.device_count()):
            props = torch.neuron.get_device_properties(i)
            devices.append(f"{torch.neuron.get_device_name(i)} {props.name} {props.total_memory / 2**30:.0f} GiB")
    info["devices"] = devices
    for library in ("transformers", "trl", "diffusers"):
        try:
            importlib.import_module(library)  # importing runs the adapter (hf_neuron.adapters)
        except Exception as exc:  # a broken library must not hide the rest of the report
            info.setdefault("errors", []).append(f"import {library}: {exc!r}")
    try:
        from hf_neuron.transformers import import_fix_targets

        import_fix_targets()  # fixes wait for their module's import; the report wants them all decided
    except Exception as exc:
        info.setdefault("errors", []).append(f"transformers fixes: {exc!r}")
    info["fixes"] = [
        {"name": f.name, "library": f.library, "active": f.active, "status": f.reason, "gap": f.gap}
        for f in fixes.all_fixes()
    ]
    return info


def render(info: dict) -> str:
    lines = [f"hf_neuron {info['hf_neuron']}  (python {info['python']}, {info['platform']})", "", "Versions:"]
    for name, version in info["versions"].items():
        lines.append(f"  {name:<13} {version}")
    lines.append(f"  {'torch-neuronx':<13} {info['torch_neuronx']}")
    lines += ["", f"Neuron devices: {len(info['devices'])}"]
    lines += [f"  {d}" for d in info["devices"]]
    lines += ["", f"Adapter fixes: {len(info['fixes'])}"]
    for f in info["fixes"]:
        mark = "active  " if f["active"] else "inactive"
        lines.append(f"  [{mark}] {f['library']}:{f['name']} - {f['status']}")
        if f["gap"]:
            lines.append(f"             {f['gap']}")
    for err in info.get("errors", []):
        lines.append(f"error: {err}")
    return "\n".join(lines)


def run(args) -> int:
    info = collect()
    if args.json:
        import json

        print(json.dumps(info, indent=2))
    else:
        print(render(info))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("env", help="versions, neuron devices and hf_neuron's fixes (active or not)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
