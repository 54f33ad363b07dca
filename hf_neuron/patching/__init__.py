"""The one mechanism by which hf_neuron changes upstream libraries.

- :mod:`.registry`: the named *fixes* (the upstream gap each fills, how it is detected, its status),
  listed by ``hf-neuron env``.
- :mod:`.imports`: a callback when a module has finished importing, without importing it.
- :mod:`.attributes`: :func:`wrap` / :func:`replace`, which record originals, and
  :func:`upstream_behaviour`, which puts them back for a block.
- :mod:`.sources`: what an upstream module's source says, read without importing it.

Adapters (``hf_neuron.transformers``, ``hf_neuron.trl``, ``hf_neuron.diffusers``) and the simulated
device change upstream objects only through these.
"""

from hf_neuron.patching.attributes import (
    is_enabled,
    is_patched,
    original,
    replace,
    require_methods,
    upstream_behaviour,
    wrap,
)
from hf_neuron.patching.imports import deliver_finished, is_imported, when_imported
from hf_neuron.patching.registry import (
    APPLIED,
    CLOSED,
    DISABLED,
    PENDING,
    UNKNOWN,
    WAITING,
    Fix,
    adapters_disabled,
    all_fixes,
    apply_fixes,
    fix,
    get_fix,
    import_targets,
    mark_closed,
    mark_unknown,
    set_status,
    unknown_fixes,
)

__all__ = [
    "APPLIED",
    "CLOSED",
    "DISABLED",
    "PENDING",
    "UNKNOWN",
    "WAITING",
    "Fix",
    "adapters_disabled",
    "all_fixes",
    "apply_fixes",
    "deliver_finished",
    "fix",
    "get_fix",
    "import_targets",
    "is_enabled",
    "is_imported",
    "is_patched",
    "mark_closed",
    "mark_unknown",
    "original",
    "replace",
    "require_methods",
    "set_status",
    "unknown_fixes",
    "upstream_behaviour",
    "when_imported",
    "wrap",
]
