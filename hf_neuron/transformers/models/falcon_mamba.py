"""Falcon-Mamba: prefill chunks that continue from the cached recurrent state (its copy of Mamba's scan)."""

from __future__ import annotations

from hf_neuron.patching import fix
from hf_neuron.transformers.models.mamba import patch_scan, scan_forgets_cached_state

FALCON_MAMBA_SCAN_FIX = "falcon-mamba-chunk-scan-initial-state"
FALCON_MAMBA_MODULE = "transformers.models.falcon_mamba.modeling_falcon_mamba"


@fix(FALCON_MAMBA_SCAN_FIX, "transformers",
     lambda: scan_forgets_cached_state(FALCON_MAMBA_SCAN_FIX, FALCON_MAMBA_MODULE, "FalconMambaConfig", "FalconMambaForCausalLM"),
     waits_for=FALCON_MAMBA_MODULE)
def patch_falcon_mamba_scan_initial_state() -> None:
    """Falcon-Mamba's prefill chunks after the first start from a zero state: chunked generation is wrong.

    Gap, detection and patch as ``mamba-chunk-scan-initial-state``, for Falcon-Mamba's own copy of
    the mixer and the scan.
    """
    patch_scan(FALCON_MAMBA_SCAN_FIX, FALCON_MAMBA_MODULE, "FalconMambaMixer")


__all__ = ["FALCON_MAMBA_SCAN_FIX"]
