"""What the user-facing commands print: what they are asked for, not upstream's side remarks.

Deciding hf_neuron's fixes, or building a model on the meta device to size it, runs upstream code paths
that log warnings meant for a user running that model (Transformers' "kernel falling back to its
reference implementation" for Mamba, for one). A command reporting on the environment or a model
silences them while it works; hf_neuron's own warnings (a fix that cannot be decided) still print.
"""

from __future__ import annotations

import contextlib
import warnings


@contextlib.contextmanager
def upstream_warnings_silenced():
    """Transformers' logging at error level and Python warnings ignored, for the block."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)
