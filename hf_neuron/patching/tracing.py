"""Whether a callable traces into one graph, asked of Dynamo without compiling anything.

Detectors of fixes that make a forward traceable (static-shape expert dispatch, masked selection
written without data-dependent shapes) decide the gap by behaviour: they trace a tiny upstream
module with ``fullgraph=True`` into a backend that stops as soon as Dynamo hands it the captured
graph, and answers no when a size in that graph is a symbol (Dynamo can capture ``nonzero`` with an
unbacked size, which the neuron backend then rejects). Nothing runs on a device (Dynamo traces with
fake tensors), nothing is compiled and the backend's exception leaves no cache entry behind.
"""

from __future__ import annotations


class Captured(Exception):
    """Raised by the tracing backend: Dynamo handed it the whole callable as one graph."""


class DataDependentShapes(Exception):
    """Raised by the tracing backend: the graph was captured, but some of its sizes are symbols (an op
    whose output size is data, such as ``nonzero``), which a static-shape compiler rejects."""


def _symbolic(value) -> bool:
    import torch

    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(size, torch.SymInt) for size in value.shape)
    if isinstance(value, (list, tuple)):
        return any(_symbolic(item) for item in value)
    return False


def stop_at_the_graph(graph_module, example_inputs):
    """The tracing backend: stops with :class:`Captured` when every size in the graph is static."""
    for node in graph_module.graph.nodes:
        if _symbolic(node.meta.get("val")) or _symbolic(node.meta.get("example_value")):
            raise DataDependentShapes(f"{node.format_node()}")
    raise Captured


def captured(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it wraps) is the tracing backend's :class:`Captured`."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Captured):
            return True
        seen.add(id(exc))
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return False


def traces_whole(module, *args, **kwargs) -> bool:
    """Whether ``module(*args, **kwargs)`` traces into one graph, with static shapes and no gradients."""
    import torch
    import torch._dynamo

    traced = torch.compile(module, backend=stop_at_the_graph, fullgraph=True, dynamic=False)
    try:
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False), torch.no_grad():
            traced(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure to capture is the answer
        return captured(exc)
    return False
