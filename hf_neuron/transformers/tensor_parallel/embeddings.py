"""Token embeddings under tensor parallelism on Neuron: sharded only where it compiles and computes the same.

- ``dtensor-embedding-mask-without-index-put``: the vocabulary-parallel embedding
  (``"embedding_rowwise"``, the default for ``embed_tokens``) runs through DTensor's
  ``_MaskPartial``, which zeroes out-of-shard token ids with boolean-mask assignments
  (``x[mask] = 0``). Inside a compiled graph that is ``aten.index_put`` with a boolean index, which
  needs ``nonzero`` and does not compile on Neuron: every tensor-parallel ``generate`` fails.
- ``tp-embedding-read-replicated``: an embedding whose weight the model's own forward reads (Gemma 4's
  multimodal forward takes the pad token's row) stays whole instead of vocabulary-sharded.
- ``tp-embedding-postprocessed-replicated``: an embedding module that post-processes its lookup stays
  whole too.
"""

from __future__ import annotations

import inspect
import re

import torch

from hf_neuron.patching import fix, replace, wrap

MASK_FIX = "dtensor-embedding-mask-without-index-put"


# ----------------------------------------------------------------------------- DTensor masks


def _mask_tensor(tensor, local_offset_on_dim, local_shard_size):
    mask = (tensor < local_offset_on_dim) | (tensor >= local_offset_on_dim + local_shard_size)
    masked_tensor = torch.where(mask, torch.zeros_like(tensor), tensor - local_offset_on_dim)
    return mask, masked_tensor


def _apply_mask(self, tensor):
    if self.refcount == 0 or self.data is None:
        raise RuntimeError("MaskBuffer has not been materialized")
    mask = self.data if tensor.ndim == self.data.ndim else self.data.unsqueeze(-1)
    tensor.masked_fill_(mask, 0.0)


def _masks_use_boolean_index_put() -> bool:
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial
    from torch.fx.experimental.proxy_tensor import make_fx

    def embedding_masks(ids, output):
        mask, _ = _MaskPartial._mask_tensor(ids, 2, 3)
        buffer = MaskBuffer()
        buffer.materialize_mask(mask)
        buffer.apply_mask(output)
        return output

    graph = make_fx(embedding_masks)(torch.arange(8), torch.ones(8, 2))
    return any(
        node.op == "call_function" and "index_put" in str(node.target) for node in graph.graph.nodes
    )


@fix(MASK_FIX, "transformers", _masks_use_boolean_index_put, waits_for="transformers.distributed.tensor_parallel")
def patch_dtensor_embedding_masks() -> None:
    """Vocabulary-parallel embeddings do not compile on Neuron (boolean-mask ``index_put``).

    Gap: DTensor's ``_MaskPartial`` (used for ``"embedding_rowwise"``, Transformers' default TP
    style for ``embed_tokens``) masks token ids outside the local vocabulary shard with
    ``x[mask] = 0`` and zeroes their embeddings with ``out[mask, :] = 0``: ``aten.index_put`` with a
    boolean index, which needs ``nonzero`` and fails to compile on Neuron. Detected by tracing both
    mask steps and finding ``index_put``. Patch: the same masks with ``torch.where`` and
    ``masked_fill_`` (same values, static shapes).
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor
    from torch.distributed.tensor._ops._mask_buffer import MaskBuffer
    from torch.distributed.tensor.placement_types import _MaskPartial

    replace(MASK_FIX, _MaskPartial, "_mask_tensor", staticmethod(maybe_run_for_local_tensor(_mask_tensor)))
    replace(MASK_FIX, MaskBuffer, "apply_mask", _apply_mask)


# ------------------------------------------------------------------ embeddings read as weights

READ_EMBEDDING_FIX = "tp-embedding-read-replicated"
_AUTOMATIC_EMBEDDING_STYLE = "embedding_rowwise"
_READS_EMBEDDING_WEIGHT = re.compile(r"\bembed_tokens\.weight\b")


def _forward_reads_embedding_weight(model) -> bool:
    """True when the forward of a module class in `model` reads ``embed_tokens.weight`` itself."""
    for cls in {type(module) for module in model.modules()}:
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            continue
        if _READS_EMBEDDING_WEIGHT.search(source):
            return True
    return False


def _replicate_embeddings(model, distributed_config, keep_whole) -> None:
    """Make the automatic vocabulary-parallel rule of each embedding ``keep_whole(name, module)`` selects
    ``"replicate"``, with the LM head tied to it; a style the user chose is kept."""
    chosen = distributed_config.tp_plan if isinstance(distributed_config.tp_plan, dict) else {}
    modules = dict(model.named_modules())
    whole = {name for name, style in model.tp_plan.items()
             if style == _AUTOMATIC_EMBEDDING_STYLE and name not in chosen and keep_whole(name, modules.get(name))}
    # A head tied to a whole embedding shares its (whole) weight, so it cannot be sharded either.
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if source.removesuffix(".weight") in whole and target.removesuffix(".weight") not in chosen:
            whole.add(target.removesuffix(".weight"))
    if whole:
        model._tp_plan = {name: "replicate" if name in whole else style for name, style in model.tp_plan.items()}


def _resolve_keeping_read_embeddings_whole(original, self, distributed_config, *args, **kwargs):
    if distributed_config.tp_size > 1 and _forward_reads_embedding_weight(self):
        _replicate_embeddings(self, distributed_config, lambda name, module: name.rsplit(".", 1)[-1] == "embed_tokens")
    return original(self, distributed_config, *args, **kwargs)


def _embeddings_sharded_by_default(embedding_class=torch.nn.Embedding) -> bool:
    from transformers import LlamaConfig
    from transformers.distributed.mixin import DistributedMixin

    class _Probe(torch.nn.Module, DistributedMixin):
        def __init__(self):
            super().__init__()
            self.config = LlamaConfig(vocab_size=16, hidden_size=8, num_attention_heads=2, num_key_value_heads=2)
            self.embed_tokens = embedding_class(16, 8)

        @property
        def base_model(self):
            return self

    probe = _Probe()
    probe.init_parallel_plans()
    return probe.tp_plan.get("embed_tokens") == _AUTOMATIC_EMBEDDING_STYLE


@fix(READ_EMBEDDING_FIX, "transformers", _embeddings_sharded_by_default, waits_for="transformers.distributed.mixin")
def patch_read_embeddings_replicated() -> None:
    """A model whose forward reads its embedding weight cannot run with that weight vocabulary-sharded.

    Gap: Transformers adds ``embed_tokens: "embedding_rowwise"`` to every base model's TP plan, which
    turns the weight into a DTensor sharded over the vocabulary. The embedding's own forward handles
    that, but code that indexes the weight directly does not: Gemma 4's multimodal forward builds its
    per-layer inputs from ``embed_tokens.weight[pad_token_id]`` and ``torch.where`` then mixes that
    DTensor with plain tensors and raises, so every tensor-parallel Gemma 4 forward fails. Detected by
    letting the model mixin build the plans of a base model with a Llama configuration and an
    embedding, and reading the embedding's style.
    Patch: when a module class of the model reads ``embed_tokens.weight`` in its forward, the default
    rule becomes ``"replicate"`` (each rank keeps the whole table), and so does the rule of an LM head
    tied to it (it shares the weight); a style the user passes in
    ``DistributedConfig(tp_plan=...)`` is kept.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(READ_EMBEDDING_FIX, DistributedMixin, "_resolve_parallel_plans", _resolve_keeping_read_embeddings_whole)


POSTPROCESSED_EMBEDDING_FIX = "tp-embedding-postprocessed-replicated"


def _post_processes_lookup(module) -> bool:
    """An embedding whose class overrides the lookup's forward and holds a module it applies there (a norm).

    A forward that only scales the lookup (Gemma's ``ScaledWordEmbedding``) holds no module: a scaled
    partial sum is the partial sum of the scaled rows, so those stay vocabulary-sharded.
    """
    return (isinstance(module, torch.nn.Embedding) and type(module).forward is not torch.nn.Embedding.forward
            and any(True for _ in module.children()))


def _resolve_keeping_postprocessed_embeddings_whole(original, self, distributed_config, *args, **kwargs):
    if distributed_config.tp_size > 1:
        _replicate_embeddings(self, distributed_config, lambda name, module: _post_processes_lookup(module))
    return original(self, distributed_config, *args, **kwargs)


class _NormedEmbedding(torch.nn.Embedding):
    """The detection's embedding: a lookup followed by a normalisation, as Muse Glimmer's and Inkling's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.embed_norm = torch.nn.LayerNorm(self.embedding_dim, elementwise_affine=False)

    def forward(self, input):
        return self.embed_norm(super().forward(input))


@fix(POSTPROCESSED_EMBEDDING_FIX, "transformers", lambda: _embeddings_sharded_by_default(_NormedEmbedding),
     waits_for="transformers.distributed.mixin")
def patch_postprocessed_embeddings_replicated() -> None:
    """An embedding that normalises its own lookup fails when vocabulary-sharded (Muse Glimmer, Inkling).

    Gap: ``"embedding_rowwise"``, the rule Transformers adds for every ``embed_tokens``, all-reduces
    the lookup after the module's whole forward. An embedding class that post-processes the lookup in
    its forward (an RMS norm, in Muse Glimmer's and Inkling's) then runs it on each rank's partial
    lookup: DTensor's pending mask is reduced twice (``AssertionError``), and a norm of a partial sum
    is not the norm of the sum. Detected by letting the model mixin build the plans of a base model
    whose embedding normalises its lookup. Patch: an embedding whose class overrides the forward and
    holds a module it applies there (a norm; a scale alone is linear and stays sharded), and a head
    tied to it, is replicated (each rank keeps the whole table); a style the user passes is kept.
    """
    from transformers.distributed.mixin import DistributedMixin

    wrap(POSTPROCESSED_EMBEDDING_FIX, DistributedMixin, "_resolve_parallel_plans",
         _resolve_keeping_postprocessed_embeddings_whole)


__all__ = ["MASK_FIX", "POSTPROCESSED_EMBEDDING_FIX", "READ_EMBEDDING_FIX"]
