"""Absolute positions counted from the static cache's length, in a shape a graph can hold.

Shared by the TrOCR, MVP and RoFormer fixes (:mod:`.trocr`, :mod:`.mvp`, :mod:`.roformer`).

Their decoders ask the cache for its length and hand it to their position embedding, whose forward
(``(input, cache_length=0, position_ids=None)``; the length is named ``past_key_values_length`` in
older releases) makes the positions as ``torch.arange(length, length + seq_len)``. A static cache
keeps its length as a 0-d tensor (so that a compiled step does not guard on an int that changes at
every step), and an ``arange`` between two tensor values has a size Dynamo cannot know: the prefill
chunk and the decode step fail to trace (``PendingUnbackedSymbolNotFound: Pending unbacked symbols
... size=(u0 - u1,)``). Transformers marks these models ``_can_compile_fullgraph=False``, and
generate on Neuron runs them eagerly, every op dispatched on its own.

Here, when the length is a tensor and no positions are given, the embedding is given
``torch.arange(seq_len) + length``: the same numbers, in a tensor of static size. The embedding
rows of the batch are the same positions, expanded to the batch as upstream's are.
"""

from __future__ import annotations

import importlib
import inspect

import torch

from hf_neuron.patching import fix, original, wrap
from hf_neuron.patching.tracing import traces_whole


def _lengths(inputs) -> tuple[int, int]:
    """``(batch, tokens)`` of the embedding's first argument: ids, or their shape."""
    shape = inputs if isinstance(inputs, torch.Size) else inputs.shape
    return int(shape[0]), int(shape[1])


def _parameter_names(embedding_class) -> tuple[str, str]:
    """The names upstream's forward takes the length and the positions under (checked: 4 parameters)."""
    parameters = list(inspect.signature(original(embedding_class, "forward")).parameters)
    if len(parameters) != 4 or parameters[3] != "position_ids":
        raise RuntimeError(f"{embedding_class.__qualname__}.forward takes {parameters[1:]}, "
                           "not (inputs, length, position_ids)")
    return parameters[2], parameters[3]


def positions_from_tensor_length(embedding_class):
    """The wrapper of ``embedding_class.forward`` (the parameter names are looked up here, once: the
    wrapper runs inside compiled forwards)."""
    length_name, positions_name = _parameter_names(embedding_class)

    def forward(original_fn, self, inputs, *args, **kwargs):
        length = args[0] if args else kwargs.get(length_name, 0)
        positions = args[1] if len(args) > 1 else kwargs.get(positions_name)
        if positions is not None or not isinstance(length, torch.Tensor):
            return original_fn(self, inputs, *args, **kwargs)
        batch, tokens = _lengths(inputs)
        positions = torch.arange(tokens, dtype=torch.long, device=self.weight.device) + length.to(self.weight.device)
        embedded = original_fn(self, inputs, length, positions)
        if embedded.dim() == 3 and embedded.shape[0] != batch:  # given positions are one row for the batch
            embedded = embedded.expand(batch, -1, -1)
        return embedded

    return forward


def length_breaks_the_graph(embedding_class, inputs) -> bool:
    """Whether upstream's forward of ``embedding_class`` (a tiny one: 8 positions of 4 features) on
    ``inputs`` fails to trace whole with a 0-d tensor length, the static cache's length type."""
    _parameter_names(embedding_class)
    module = embedding_class(8, 4)
    forward = original(embedding_class, "forward")
    return not traces_whole(lambda length: forward(module, inputs, length), torch.tensor(3))


def declare_positions_fix(declaring_module: str, model_type: str, embedding_class_name: str, sample_input,
                          decoder: str) -> str:
    """Declare the fix ``<model_type>-positions-from-cache-length`` for ``embedding_class_name`` of
    Transformers' ``modeling_<model_type>``, as the module ``declaring_module`` (``models/<model_type>.py``,
    where ``hf-neuron env`` and the fix reference show it); returns the fix's name.

    ``sample_input()`` is the embedding's first argument for the detector; ``decoder`` names the model
    in the gap's first line."""
    name = f"{model_type}-positions-from-cache-length"
    upstream_module = f"transformers.models.{model_type}.modeling_{model_type}"

    def embedding_class():
        return getattr(importlib.import_module(upstream_module), embedding_class_name)

    def detect() -> bool:
        return length_breaks_the_graph(embedding_class(), sample_input())

    def apply() -> None:
        wrap(name, embedding_class(), "forward", positions_from_tensor_length(embedding_class()))

    apply.__module__ = declaring_module
    apply.__doc__ = f"""{decoder} does not trace into one graph per generation step, so generate runs it eagerly.

    Gap: ``{embedding_class_name}`` makes positions as ``arange(length, length + tokens)`` from the
    cache's length, a 0-d tensor for a static cache: a size Dynamo cannot know. Detected by tracing
    upstream's embedding with a tensor length. Patch: given a tensor length and no positions, the
    embedding gets ``arange(tokens) + length`` (the same positions, a static size).
    """
    fix(name, "transformers", detect, waits_for=upstream_module)(apply)
    return name


__all__ = ["declare_positions_fix", "length_breaks_the_graph", "positions_from_tensor_length"]
