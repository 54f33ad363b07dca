"""The registry the plan tables fill in: which diffusers classes hf_neuron supplies a TP plan or
``_repeated_blocks`` for, and where upstream defines each class.

Nothing here imports diffusers: the adapter registers its fixes when ``import diffusers`` runs, and
diffusers' model modules are imported lazily (importing all 75 transformer modules costs seconds).
Plan bodies are *builders* (functions returning the plan dict) so that the ``PackedColwiseParallel``
markers they use are imported only once the model's own module is.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

TRANSFORMERS_PACKAGE = "diffusers.models.transformers"


@dataclasses.dataclass(frozen=True)
class ClassPlan:
    """A tensor-parallel plan for one diffusers class.

    ``build()`` returns the plan in diffusers' own ``_tp_plan`` format (flat ``{glob: style}``).
    ``across_heads_norms`` lists globs of RMSNorms that normalise a column-sharded projection over
    *all* heads at once (``qk_norm="rms_norm_across_heads"``): after sharding, each rank holds only
    its heads' slice, so hf_neuron swaps them for a norm that all-reduces the sum of squares.
    ``packed_blocks`` maps a plan glob whose style is a packed one without fixed ``blocks`` to a
    function of the ModuleList element returning the absolute block sizes (e.g. the attention and MLP
    widths concatenated at a single-stream block's ``proj_out``); they are set as the
    ``_tp_packed_*_blocks`` attribute diffusers reads, as Flux's ``__init__`` does upstream.
    ``sharded_rotary`` maps the path of a rotary-embedding module whose ``(cos, sin)`` span all heads
    (LTX applies them before splitting heads) to the dimension holding the heads' features (or a
    function of the module returning it): each rank keeps its own heads' slice of the output.
    ``local_sizes`` maps a glob of modules to integer attributes their forward uses to split a
    column-sharded tensor (Ovis' ``mlp_hidden_dim``); they become per-rank sizes, like head counts.
    ``sharded_parameters`` maps a glob of parameters holding one entry per head (LuminaNext's
    cross-attention gate, a ``[heads]`` vector the block multiplies the attention output with) to the
    dimension indexing the heads: each rank keeps its own heads' slice, as a plain local tensor.
    """

    class_name: str
    module: str  # module under diffusers.models.transformers
    build: Callable[[], dict]
    across_heads_norms: tuple[str, ...] = ()
    packed_blocks: dict = dataclasses.field(default_factory=dict)
    sharded_rotary: dict = dataclasses.field(default_factory=dict)
    local_sizes: dict = dataclasses.field(default_factory=dict)
    sharded_parameters: dict = dataclasses.field(default_factory=dict)
    notes: str = ""

    @property
    def module_path(self) -> str:
        return f"{TRANSFORMERS_PACKAGE}.{self.module}"


PLANS: dict[str, ClassPlan] = {}


def tp_plan(
    class_name: str,
    module: str,
    *,
    across_heads_norms: tuple[str, ...] = (),
    packed_blocks: dict | None = None,
    sharded_rotary: dict | None = None,
    local_sizes: dict | None = None,
    sharded_parameters: dict | None = None,
    notes: str = "",
):
    """Decorator registering a plan builder for ``class_name`` (defined in ``module``)."""

    def register(build: Callable[[], dict]) -> Callable[[], dict]:
        PLANS[class_name] = ClassPlan(
            class_name, module, build, tuple(across_heads_norms), dict(packed_blocks or {}), dict(sharded_rotary or {}),
            dict(local_sizes or {}), dict(sharded_parameters or {}), notes,
        )
        return build

    return register
