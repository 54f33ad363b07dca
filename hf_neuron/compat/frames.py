"""Which package a stack frame's file belongs to, judged by where the packages are installed.

A failure reason names the frame where things went wrong, and a crash report the model code that
called it. Telling model code (``transformers/models/...``) from hf_neuron's own adapter
(``hf_neuron/transformers/...``) cannot be done by looking for ``/transformers/`` in a path, and
any fixed directory name only holds on one machine. So each frame's file is compared with the
directories the packages are imported from, wherever they are installed (site-packages, an
editable checkout, a wheel unpacked elsewhere), and shown relative to the directory holding its
package: ``transformers/models/llama/modeling_llama.py``, ``hf_neuron/transformers/generation/defaults.py``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import site
import sysconfig

# Packages a frame is classified into; the order does not matter (their directories are disjoint).
KNOWN_PACKAGES = ("hf_neuron", "transformers", "diffusers", "torch")
# hf_neuron's harness (this package) is never where a failure "happened".
HARNESS = "hf_neuron/compat/"


def _normal(path: str) -> str:
    return os.path.normcase(os.path.normpath(path)).replace("\\", "/")


@functools.lru_cache(maxsize=None)
def package_dirs() -> tuple[tuple[str, str], ...]:
    """(package, directory) for each known package that is installed, found without importing it."""
    found = []
    for name in KNOWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            for path in {_normal(location), _normal(os.path.realpath(location))}:
                found.append((name, path))
    return tuple(found)


@functools.lru_cache(maxsize=None)
def _library_dirs() -> tuple[str, ...]:
    """Directories third-party packages are installed in, longest first (for shortening other paths)."""
    dirs = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    dirs.add(site.getusersitepackages())
    for key in ("purelib", "platlib"):
        dirs.add(sysconfig.get_paths()[key])
    return tuple(sorted({_normal(d) for d in dirs if d}, key=len, reverse=True))


def _split(filename: str) -> tuple[str | None, str]:
    """(package, path from the directory holding the package), or (None, the normalised path)."""
    path = _normal(filename)
    for name, directory in package_dirs():
        if path.startswith(directory + "/"):
            return name, f"{name}/{path[len(directory) + 1:]}"
    return None, path


def package_of(filename: str) -> str | None:
    """The known package (``"transformers"``, ``"hf_neuron"``, ...) whose files include ``filename``."""
    return _split(filename)[0]


def short_path(filename: str) -> str:
    """``filename`` relative to the directory holding its package; unchanged for files of no package."""
    package, path = _split(filename)
    if package is not None:
        return path
    for directory in _library_dirs():
        if path.startswith(directory + "/"):
            return path[len(directory) + 1:]
    return path


def is_model_code(filename: str) -> bool:
    """A file of the transformers library (model code and what it calls); never hf_neuron's adapter."""
    return package_of(filename) == "transformers"


def is_library_or_adapter(filename: str) -> bool:
    """transformers' files or hf_neuron's (its adapters, simulator), except the compatibility harness."""
    package, path = _split(filename)
    if package == "transformers":
        return True
    return package == "hf_neuron" and not path.startswith(HARNESS)


def portable_text(text: str, extra_roots: tuple[str, ...] = ()) -> str:
    """``text`` (a traceback, an error message) with the install locations of files cut off, as
    :func:`short_path` names them, so recorded results read the same on every machine.
    ``extra_roots`` are further directories to cut (a source checkout)."""
    replacements = [(f"{directory}/", f"{name}/") for name, directory in package_dirs()]
    replacements += [(f"{_normal(root)}/", "") for root in extra_roots]
    replacements += [(f"{directory}/", "") for directory in _library_dirs()]
    # Longest first, so that a package inside a library directory keeps its own name.
    for old, new in sorted(replacements, key=lambda pair: len(pair[0]), reverse=True):
        text = text.replace(old, new)
    return text
