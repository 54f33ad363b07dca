"""`hf-neuron env`: versions, neuron devices and the adapters' fixes, for bug reports."""

from __future__ import annotations

import importlib
import platform
import sys

from hf_neuron import patching
from hf_neuron.versions import CHECKED as LIBRARIES
from hf_neuron.versions import installed_version, is_verified, verified_ranges


def _version(dist: str) -> str:
    return installed_version(dist) or "not installed"


def collect() -> dict:
    import torch

    from hf_neuron import __version__
    from hf_neuron.simulator import is_simulated, real_torch_neuronx_installed

    info: dict = {"hf_neuron": __version__, "python": platform.python_version(), "platform": platform.platform()}
    info["versions"] = {name: _version(name) for name in LIBRARIES}
    info["verified_ranges"] = verified_ranges()
    info["unverified"] = [name for name in LIBRARIES if is_verified(name) is False]
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
    for library in ("transformers", "trl", "diffusers", "peft"):
        try:
            importlib.import_module(library)  # importing runs the adapter (hf_neuron.adapters)
        except Exception as exc:  # a broken library must not hide the rest of the report
            info.setdefault("errors", []).append(f"import {library}: {exc!r}")
    from hf_neuron.adapters import ADAPTERS, neuron_device_available
    from hf_neuron.commands.output import upstream_warnings_silenced

    if neuron_device_available():
        for library, adapter in ADAPTERS.items():
            # Fixes wait for their module's import; the report wants them all decided.
            try:
                importlib.import_module(adapter).register()
                with upstream_warnings_silenced():  # detectors run upstream code that logs for its users
                    patching.import_targets(library)
            except Exception as exc:
                info.setdefault("errors", []).append(f"{library} fixes: {exc!r}")
    else:  # list what would be applied; nothing is patched in a process without a neuron device
        for adapter in ADAPTERS.values():
            importlib.import_module(adapter).register()
        for f in patching.all_fixes():
            if not f.decided:
                patching.set_status(f.name, patching.WAITING, "no neuron device in this process: nothing is patched")
    info["fixes"] = [
        {"name": f.name, "library": f.library, "active": f.active, "status": f.status, "reason": f.reason, "gap": f.gap,
         "module": f.apply.__module__, "details": _details(f.apply)}
        for f in patching.all_fixes()
    ]
    return info


def _details(apply) -> str:
    """The fix's docstring after its first paragraph (how the gap is detected, what the patch does)."""
    import inspect

    paragraphs = (inspect.getdoc(apply) or "").split("\n\n")[1:]
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def render(info: dict) -> str:
    lines = [f"hf_neuron {info['hf_neuron']}  (python {info['python']}, {info['platform']})", "", "Versions:"]
    for name, version in info["versions"].items():
        spec = info["verified_ranges"].get(name)
        note = ""
        if spec:
            note = f"  (verified {spec})" if name not in info["unverified"] else f"  NOT VERIFIED: hf_neuron is tested on {spec}"
        lines.append(f"  {name:<13} {version}{note}")
    lines.append(f"  {'torch-neuronx':<13} {info['torch_neuronx']}")
    lines += ["", f"Neuron devices: {len(info['devices'])}"]
    lines += [f"  {d}" for d in info["devices"]]
    lines += ["", f"Adapter fixes: {len(info['fixes'])}"]
    for f in info["fixes"]:
        mark = {patching.APPLIED: "active  ", patching.UNKNOWN: "UNKNOWN "}.get(f["status"], "inactive")
        lines.append(f"  [{mark}] {f['library']}:{f['name']} - {f['reason']}")
        if f["gap"]:
            lines.append(f"             {f['gap']}")
    for err in info.get("errors", []):
        lines.append(f"error: {err}")
    return "\n".join(lines)


#: How each adapter's section of the fix reference is titled.
LIBRARY_TITLES = {"transformers": "Transformers", "trl": "TRL", "diffusers": "Diffusers", "peft": "PEFT"}
STATUS_WORDS = {patching.APPLIED: "active", patching.CLOSED: "closed upstream", patching.UNKNOWN: "UNKNOWN"}


def render_markdown(info: dict) -> str:
    """The fix reference (a Markdown page): every fix by library, with its gap, detection, patch and status,
    read from the fixes themselves."""
    releases = ", ".join(f"{name} {info['versions'][name]}"
                         for name in ("torch", "transformers", "trl", "diffusers", "peft"))
    lines = [
        "# Fix reference",
        "",
        "Every adaptation hf_neuron makes to an upstream library is a named *fix*: the gap it fills (the first",
        "paragraph), how it detects that the gap exists and what the patch does, and its status. This page is",
        "generated from the fixes' own docstrings and detectors (`hf-neuron env --markdown`); `hf-neuron env`",
        "prints the same for your installation.",
        "",
        f"Status as decided on: {releases}, torch-neuronx {info['torch_neuronx']}.",
        "",
        "- **active**: the gap exists on the installed release and the fix is applied;",
        "- **closed upstream**: the installed release no longer has the gap, nothing is patched;",
        "- **UNKNOWN**: the detector could not decide (a warning, and `hf-neuron env --check` fails).",
    ]
    libraries = [library for library in LIBRARY_TITLES if any(f["library"] == library for f in info["fixes"])]
    for library in libraries:
        fixes = sorted((f for f in info["fixes"] if f["library"] == library), key=lambda f: f["name"])
        lines += ["", f"## {LIBRARY_TITLES[library]}", "", f"{len(fixes)} fixes.", ""]
        for f in fixes:
            status = STATUS_WORDS.get(f["status"], f["status"])
            lines += [f"### `{f['name']}`", "", f"*{status}* ({f['reason']}); in `{f['module']}`.", "", f["gap"] or "-"]
            if f.get("details"):
                lines += ["", f["details"]]
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def problems(info: dict) -> list[str]:
    """What makes ``--check`` fail: undecidable fixes, unverified releases, libraries that fail to import."""
    found = [f"fix {f['library']}:{f['name']} could not be detected: {f['reason']}" for f in info["fixes"]
             if f["status"] == patching.UNKNOWN]
    found += [f"{name} {info['versions'][name]} is outside the verified range {info['verified_ranges'][name]}"
              for name in info["unverified"]]
    found += info.get("errors", [])
    return found


def run(args) -> int:
    info = collect()
    if args.json:
        import json

        print(json.dumps(info, indent=2))
    elif args.markdown:
        print(render_markdown(info), end="")
    else:
        print(render(info))
    if not args.check:
        return 0
    found = problems(info)
    for problem in found:
        print(f"check failed: {problem}", file=sys.stderr)
    if not found:
        print("check passed: every fix decided, every library in its verified range", file=sys.stderr)
    return 1 if found else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("env", help="versions, neuron devices and hf_neuron's fixes (active or not)")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    output.add_argument("--markdown", action="store_true",
                        help="the fix reference page: every fix's gap, detection, patch and status, in Markdown")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a fix's detection could not decide, a library is outside its verified range, "
        "or a library fails to import",
    )
    p.set_defaults(func=run)
