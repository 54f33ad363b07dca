"""The upstream releases hf_neuron is verified on, and a warning when a process runs another one.

The fixes sit on upstream internals, so a release we never tested can switch one off silently. The
ranges in ``pyproject.toml`` are exactly the releases the test suite passes on (CI runs it on the
newest and on the oldest of each range), so a fresh install never resolves an untested release. This
module reads those same ranges from the installed package's metadata (one source of truth) and warns
once per library when the installed release is outside its range, e.g. after a user forced a newer
one.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging

logger = logging.getLogger("hf_neuron")

DISTRIBUTION = "hf-neuron"
#: The upstream libraries whose ranges are checked (those the adapters patch or build on).
CHECKED = ("torch", "transformers", "diffusers", "trl", "peft", "accelerate", "datasets", "tokenizers")

_warned: set[str] = set()


@functools.lru_cache(maxsize=None)
def verified_ranges() -> dict[str, str]:
    """``{library: specifier}`` as declared by the installed hf-neuron (empty when not installed)."""
    from packaging.requirements import Requirement

    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    ranges = {}
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is not None:  # extras ("test") are not runtime dependencies
            continue
        ranges[requirement.name.lower()] = str(requirement.specifier)
    return ranges


def installed_version(library: str) -> str | None:
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_verified(library: str) -> bool | None:
    """Whether the installed ``library`` is in its verified range (None: not installed or no range)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version, spec = installed_version(library), verified_ranges().get(library)
    if version is None or spec is None:
        return None
    return SpecifierSet(spec).contains(Version(version), prereleases=True)


def warn_if_unverified(library: str) -> None:
    """Warn once per process when the installed ``library`` is outside the verified range."""
    if library in _warned or is_verified(library) is not False:
        return
    _warned.add(library)
    logger.warning(
        "hf_neuron: %s %s is outside the range hf_neuron is verified on (%s%s). Its fixes may not apply "
        "or may be wrong on this release; `hf-neuron env --check` reports what was detected. Install a "
        "verified release (pip install '%s%s') or a newer hf_neuron.",
        library,
        installed_version(library),
        library,
        verified_ranges()[library],
        library,
        verified_ranges()[library],
    )
