"""diffusers transformer classes hf_neuron does not shard with tensor parallelism, and why.

Filled in as each class is examined; ``compatibility/diffusers.md`` publishes the table.
"""

from __future__ import annotations

UNSHARDABLE: dict[str, str] = {}
