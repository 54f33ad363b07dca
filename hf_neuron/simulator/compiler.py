"""The ``"neuron"`` Dynamo backend: ``torch.compile(model, backend="neuron")``.

Registered through the ``torch_dynamo_backends`` entry point, as TorchNeuron registers its own, so
this module is imported only when a compile asks for ``"neuron"``. Where the simulator is not
active and a real torch-neuronx is installed, the graph goes to TorchNeuron's backend. Otherwise a
simulated compiler runs it, holding graphs to what TorchNeuron's compiler accepts:

- static shapes only: ``dynamic=True`` and any graph with symbolic sizes (including the recompile
  Dynamo's automatic dynamic shapes makes after a second input shape) raise
  ``Dynamic shapes detected in the model, but torch-neuronx requires static shapes``;
- ``mode`` other than ``"default"`` warns and runs as ``"default"``;
- ops whose output shape depends on tensor values (``nonzero``, boolean-mask ``index_put`` and
  indexing, ``masked_select``, ``unique``) fail to compile, as do FP8 dtypes, and complex dtypes
  when ``TORCH_NEURONX_COMPLEX_DECOMPOSE=0`` (neuronx-cc NCC_EVRF004). A graph that fails to
  compile raises, unless ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``: then it warns and runs
  eagerly.

Accepted graphs run with AOTAutograd and eager execution of the forward and backward graphs
(``aot_eager`` semantics), so results equal eager. Inside a graph only values count, not memory
layouts, as in TorchNeuron's lowering to StableHLO (which has no strides): see
:func:`_without_layouts`. Every graph is recorded in
:mod:`hf_neuron.simulator.graph_log`, with whether the persistent compiled-graph cache
(:mod:`hf_neuron.simulator.neff_cache`, under ``TORCH_NEURONX_NEFF_CACHE_DIR``) had it. An inference
graph this process compiled before reuses its program (:mod:`hf_neuron.simulator.loaded_programs`).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from hf_neuron.simulator import graph_log, loaded_programs, neff_cache
from hf_neuron.simulator.neff_cache import COMPLEX_DECOMPOSE_ENV

DYNAMIC_SHAPES_MESSAGE = "Dynamic shapes detected in the model, but torch-neuronx requires static shapes"
FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"

_STATIC_SHAPES_HINT = (
    "Compile with dynamic=False (or leave it unset, never dynamic=True), set "
    "torch._dynamo.config.automatic_dynamic_shapes = False so that each new input shape compiles a "
    "new static graph, and pad inputs to a few fixed sizes to limit recompiles."
)

# Ops whose output shape depends on tensor values; their compiled form needs aten.nonzero.
_DATA_DEPENDENT_OPS = {
    "aten::nonzero": "use torch.nonzero_static(x, size=N) (padded to a fixed size) or torch.where(cond, a, b)",
    "aten::nonzero_numpy": "use torch.nonzero_static(x, size=N) or torch.where(cond, a, b)",
    "aten::argwhere": "use torch.nonzero_static(x, size=N) or torch.where(cond, a, b)",
    "aten::masked_select": "use torch.where(mask, x, 0) and reduce over the full tensor",
    "aten::unique": "compute it outside the compiled region",
    "aten::_unique": "compute it outside the compiled region",
    "aten::_unique2": "compute it outside the compiled region",
    "aten::unique_dim": "compute it outside the compiled region",
    "aten::unique_consecutive": "compute it outside the compiled region",
}
_INDEXING_OPS = {"aten::index_put", "aten::index_put_", "aten::_unsafe_index_put", "aten::index", "aten::_unsafe_index"}
_MASK_INDEX_HINT = {
    True: "use torch.where(mask, value, x) or x.masked_fill(mask, value) instead of x[mask] = value",
    False: "use torch.where(mask, x, 0) (or torch.nonzero_static) instead of x[mask]",
}


class NeuronCompilationError(RuntimeError):
    """The (simulated) Neuron compiler cannot compile this graph."""


class NeuronDynamicShapesError(RuntimeError):
    """A graph with symbolic sizes was handed to the backend; torch-neuronx requires static shapes."""


def neuron_backend(gm, example_inputs, *, mode: str | None = None, options: dict | None = None):
    """Dynamo backend ``"neuron"``; ``torch.compile`` passes ``mode``/``options`` when they are set."""
    if _delegate_to_real_torch_neuronx():
        kwargs = {k: v for k, v in (("mode", mode), ("options", options)) if v is not None}
        return _real_backend()(gm, example_inputs, **kwargs)
    return _SimulatedCompile(gm, example_inputs, mode, options).run()


def fallback_execution_enabled() -> bool:
    """TorchNeuron runs a graph that failed to compile eagerly only when the env var is 0."""
    return os.environ.get(FALLBACK_ENV, "1").strip().lower() in ("0", "false", "no", "off")


def _complex_decompose_enabled() -> bool:
    return os.environ.get(COMPLEX_DECOMPOSE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------- real backend


def _delegate_to_real_torch_neuronx() -> bool:
    from hf_neuron.simulator import activation

    if activation.is_simulated():
        return False
    try:
        return activation.real_torch_neuronx_installed()
    except ImportError:  # the shim module is not there: no shim finder can shadow the real package
        import importlib.util

        return importlib.util.find_spec("torch_neuronx") is not None


@functools.cache
def _real_backend():
    from importlib.metadata import entry_points

    for ep in entry_points(group="torch_dynamo_backends"):
        if ep.name == "neuron" and ep.module != __name__:
            return ep.load()
    raise RuntimeError(
        "torch-neuronx is installed but registers no 'neuron' Dynamo backend that hf_neuron can hand "
        "graphs to. Upgrade torch-neuronx, or set HF_NEURON_SIMULATOR=force to use the simulator."
    )


# ---------------------------------------------------------------------------- simulated compiler


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _flat_values(value) -> list:
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(value)


def _is_symbolic(value) -> bool:
    """True for a SymInt/SymFloat/SymBool or a tensor whose sizes are not all known integers."""
    import torch
    from torch.fx.experimental.symbolic_shapes import has_free_symbols

    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return has_free_symbols(value)
    if isinstance(value, torch.Tensor):
        return any(has_free_symbols(s) for s in value.shape if isinstance(s, torch.SymInt))
    return False


def _describe_value(value) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}".replace("'", "")
    return f"{type(value).__name__} {value}"


class _SimulatedCompile:
    """One Dynamo graph through the simulated compiler."""

    def __init__(self, gm, example_inputs, mode, options):
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.mode = mode
        self.options = options
        self.fields: dict[str, Any] = {
            "node_count": len(gm.graph.nodes),
            "inputs": [self._input_entry(x) for x in self.example_inputs],
            "device": self._device(),
            "mode": mode or "default",
            "names": [node.name for node in gm.graph.find_nodes(op="placeholder")],
        }
        self.record: dict[str, Any] | None = None
        self.pending_backward: dict[str, Any] | None = None

    @staticmethod
    def _input_entry(x) -> list:
        import torch

        if isinstance(x, torch.Tensor):
            return [[int(s) for s in x.shape], _dtype_name(x.dtype)]
        return [None, type(x).__name__]

    def _device(self) -> str | None:
        import torch

        for x in self.example_inputs:
            if isinstance(x, torch.Tensor):
                return x.device.type
        return None

    # -- checks on the Dynamo graph

    def _check_mode(self) -> None:
        if self.mode not in (None, "default"):
            warnings.warn(
                f"torch-neuronx supports only mode='default'; mode={self.mode!r} runs as 'default'.",
                UserWarning,
                stacklevel=2,
            )
        if self.options:
            warnings.warn(
                f"torch-neuronx (simulated) ignores torch.compile options {sorted(self.options)}.",
                UserWarning,
                stacklevel=2,
            )

    def _check_static_inputs(self) -> None:
        import torch

        symbolic = []
        for i, x in enumerate(self.example_inputs):
            if _is_symbolic(x):
                symbolic.append(f"input {i}: {_describe_value(x)}")
        for node in self.gm.graph.find_nodes(op="placeholder"):
            value = node.meta.get("example_value", node.meta.get("val"))
            for leaf in _flat_values(value):
                if isinstance(leaf, torch.Tensor) and _is_symbolic(leaf):
                    symbolic.append(f"{node.name}: {_describe_value(leaf)}")
        if symbolic:
            raise NeuronDynamicShapesError(
                f"{DYNAMIC_SHAPES_MESSAGE} (graph inputs with symbolic sizes: {', '.join(symbolic[:4])}"
                f"{', ...' if len(symbolic) > 4 else ''}). {_STATIC_SHAPES_HINT}"
            )
        if torch._dynamo.config.assume_static_by_default is False:
            raise NeuronDynamicShapesError(
                f"{DYNAMIC_SHAPES_MESSAGE} (torch.compile(dynamic=True) or "
                f"torch._dynamo.config.assume_static_by_default=False). {_STATIC_SHAPES_HINT}"
            )

    # -- checks on the ATen graphs

    @staticmethod
    def _unsupported(node) -> str | None:
        """Why neuronx-cc rejects this ATen node, or None."""
        import torch

        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            return None
        name = node.target._schema.name
        if name in _DATA_DEPENDENT_OPS:
            return (
                f"aten.{name[6:]} has an output shape that depends on tensor values, which static "
                f"compilation cannot express; {_DATA_DEPENDENT_OPS[name]}."
            )
        if name in _INDEXING_OPS and len(node.args) > 1:
            for index in node.args[1] or ():
                value = getattr(index, "meta", {}).get("val")
                if isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8):
                    writes = "put" in name
                    return (
                        f"boolean-mask aten.{name[6:]} needs aten.nonzero, whose output shape depends "
                        f"on the mask's values, which static compilation cannot express; "
                        f"{_MASK_INDEX_HINT[writes]}."
                    )
        for value in _flat_values(node.meta.get("val")):
            if not isinstance(value, torch.Tensor):
                continue
            if value.dtype.is_complex and not _complex_decompose_enabled():
                return (
                    f"NCC_EVRF004: complex dtype {_dtype_name(value.dtype)} produced by aten.{name[6:]} is "
                    f"not supported by the compiler; leave {COMPLEX_DECOMPOSE_ENV} unset (or 1) so that "
                    f"complex ops are decomposed into real ops."
                )
            if value.dtype.is_floating_point and value.dtype.itemsize == 1:
                return (
                    f"FP8 dtype {_dtype_name(value.dtype)} produced by aten.{name[6:]} is not supported "
                    f"by torch-neuronx; compute in bfloat16 or float32."
                )
        return None

    def _check_aten_graph(self, gm, stage: str) -> None:
        import torch

        for node in gm.graph.nodes:
            reason = self._unsupported(node)
            if reason:
                raise NeuronCompilationError(f"torch-neuronx failed to compile the {stage} graph: {reason}")
        for node in gm.graph.nodes:
            for value in _flat_values(node.meta.get("val")):
                if isinstance(value, torch.Tensor) and _is_symbolic(value):
                    raise NeuronDynamicShapesError(
                        f"{DYNAMIC_SHAPES_MESSAGE} ({stage} graph node {node.name} has size "
                        f"{_describe_value(value)}). {_STATIC_SHAPES_HINT}"
                    )

    @staticmethod
    def _graph_summary(gm) -> dict[str, Any]:
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        return {"nodes": len(calls), "ops": sorted({str(n.target) for n in calls})}

    # -- AOTAutograd compilers

    def _compile_forward(self, gm, example_inputs, *, has_backward: bool):
        from functorch.compile import make_boxed_func

        self._check_aten_graph(gm, "forward")
        _without_layouts(gm)
        summary = self._graph_summary(gm)
        self.fields.update(forward_nodes=summary["nodes"], ops=summary["ops"], backward=has_backward)
        return make_boxed_func(gm.forward)

    def _compile_backward(self, gm, example_inputs):
        from functorch.compile import make_boxed_func

        try:
            self._check_aten_graph(gm, "backward")
        except NeuronCompilationError as e:
            if not fallback_execution_enabled():
                raise
            _warn_fallback(e)
        _without_layouts(gm)
        summary = self._graph_summary(gm)
        fields = {"node_count": summary["nodes"], "ops": summary["ops"]}
        if self.record is not None:
            graph_log.record_backward(self.record, **fields)
        else:  # the backward was compiled before the forward finished
            self.pending_backward = fields
        return make_boxed_func(gm.forward)

    def _record(self, status: str, error: BaseException | None = None) -> None:
        fields = dict(self.fields, status=status)
        fields.setdefault("ops", None)
        fields.setdefault("forward_nodes", None)
        fields.setdefault("backward", None)
        fields.setdefault("cache", neff_cache.MISS)  # rejected before the lookup: a compile was attempted
        fields.setdefault("cache_key", None)
        fields["error"] = None if error is None else f"{type(error).__name__}: {error}"
        self.record = graph_log.record_graph(**fields)
        if self.pending_backward is not None:
            graph_log.record_backward(self.record, **self.pending_backward)

    def run(self):
        from torch._dynamo.backends.common import aot_autograd

        self._check_mode()
        try:
            self._check_static_inputs()
            code = neff_cache.portable_code(self.gm)
            constants = neff_cache.constants(self.gm)
            flags = neff_cache.compiler_flags(self.mode)
            key = neff_cache.graph_key(code, self.example_inputs, constants, flags)
            cached = neff_cache.lookup(key, code)
            self.fields.update(cache=neff_cache.MISS if cached is None else neff_cache.HIT, cache_key=key)
            program_key = loaded_programs.key(self.gm, self.example_inputs, constants,
                                              {**flags, "fallback": fallback_execution_enabled()})
            loaded = loaded_programs.lookup(program_key)
            if loaded is not None:
                compiled, fields = loaded
                self.fields.update(fields)
            else:
                compiled = aot_autograd(
                    fw_compiler=functools.partial(self._compile_forward, has_backward=True),
                    bw_compiler=self._compile_backward,
                    inference_compiler=functools.partial(self._compile_forward, has_backward=False),
                    keep_inference_input_mutations=True,
                )(self.gm, self.example_inputs)
                loaded_programs.keep(program_key, compiled, {name: self.fields.get(name) for name in
                                                             ("forward_nodes", "ops", "backward")})
            # The compiled callable outlives this call: it must not keep the first call's tensors (a
            # generation's whole KV cache, say) alive, as a device compiler keeps only their shapes.
            self.example_inputs = None
        except NeuronDynamicShapesError as e:
            self._record("rejected", e)
            raise
        except NeuronCompilationError as e:
            if not fallback_execution_enabled():
                self._record("rejected", e)
                raise
            _warn_fallback(e)
            self._record("fallback", e)
            return self.gm.forward
        if cached is None:
            neff_cache.store(key, code, inputs=self.fields["inputs"], ops=self.fields.get("ops"),
                             forward_nodes=self.fields.get("forward_nodes"), flags=flags)
        self._record("compiled")
        return compiled


def _contiguous(tensor):
    return tensor.contiguous()


def _without_layouts(gm) -> None:
    """Run the graph as values without layouts: ``view`` ops as ``reshape``, and the tensor inputs of
    kernels that check their input's layout made contiguous first, and layout-only clones
    (``memory_format=torch.channels_last``, which decompositions emit for an upsampling) contiguous.

    AOTAutograd traces a graph with the strides its meta kernels predict; some CPU kernels lay their
    outputs out differently (``softplus_backward`` follows its incoming gradient's layout, its meta
    kernel does not; an attention block's output added to its residual follows the transposed
    operand). The eager kernels that run the graph here then fail where the trace said a tensor was
    contiguous: ``view`` on it, or ``native_group_norm`` (a VAE's decoder), which asserts its input
    is contiguous in its suggested memory format. TorchNeuron lowers a graph to StableHLO, where a
    view is a reshape of values and no layout exists, so such a graph compiles and runs on Trainium.
    The graphs are functional (AOTAutograd applies mutations to graph inputs itself, never through a
    view), so a reshape, which copies only where a view cannot be taken, and a contiguous copy
    compute the same values.
    """
    import torch

    aten = torch.ops.aten
    # Kernel -> positions of the tensor arguments whose layout it checks.
    layout_checked = {aten.native_group_norm.default: (0,), aten.native_group_norm_backward.default: (0, 1)}
    layout_formats = (torch.channels_last, torch.channels_last_3d)
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (aten.view.default, aten._unsafe_view.default):
            node.target = aten.reshape.default
            changed = True
        elif node.target is aten.clone.default and node.kwargs.get("memory_format") in layout_formats:
            node.kwargs = {**node.kwargs, "memory_format": torch.contiguous_format}
            changed = True
        elif node.target in layout_checked:
            args = list(node.args)
            for position in layout_checked[node.target]:
                with gm.graph.inserting_before(node):
                    args[position] = gm.graph.call_function(_contiguous, (args[position],))
            node.args = tuple(args)
            changed = True
    if changed:
        gm.recompile()


def _warn_fallback(error: BaseException) -> None:
    # warnings' registry shows each distinct message once per process by default.
    warnings.warn(
        f"{error} Running this graph eagerly because {FALLBACK_ENV}=0.",
        UserWarning,
        stacklevel=3,
    )
