"""The graphs a workload will compile on Neuron and the device memory it needs, before anything compiles.

Every distinct graph is a neuronx-cc compile of minutes on Trainium, and a model that does not fit a
NeuronCore fails only after loading. The plan answers both up front from the model's configuration
alone: the model is instantiated on the ``meta`` device (no weights read, no memory used) and each
planned input shape is traced by Dynamo into a recording backend that runs the graph on meta
tensors. That gives, per shape, the number of graphs Dynamo produces (graph breaks included) and the
peak memory of the tensors the graph creates; nothing is compiled for a device.

- Generation (``plan_generation``): per batch size (or batch bucket), one prefill graph per prefill
  bucket ([batch, chunk]) and the decode graph ([batch, 1]) of compiled ``generate`` with a static
  cache of ``max_cache_len``; for a vision-language model, also the vision tower's graph per processed
  image size (``image_sizes``, or the tower's own input size), which prompts with images compile;
  memory = weights (per tensor-parallel rank) + static KV cache + the larger graph's activations.
- Training (``plan_training``): the batch shapes of a TRL SFT run on Neuron (packed: one shape;
  unpacked: the multiples of 128 up to ``max_length``) and the graphs of one training step per
  shape, counted by running one real SFT step of the same architecture at the tiny size on CPU with
  Dynamo's ``eager`` backend; memory = weights + gradients + AdamW state + the step's activations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import weakref
from pathlib import Path
from typing import Any

import torch

from hf_neuron.transformers.generation.capture import chunked_prefill_cache

from hf_neuron.transformers.generation.defaults import DEFAULT_MAX_CACHE_LEN, generation_compiles, resolve_prefill_buckets
from hf_neuron.transformers.generation.prefill_schedule import check_prefill_buckets
from hf_neuron.transformers.generation.steps import generation_steps, step_inputs

#: TRL pads unpacked SFT batches to a multiple of this on Neuron (``pad_to_multiple_of="auto"``).
TRAINING_PAD_MULTIPLE = 128
DEFAULT_SFT_MAX_LENGTH = 1024  # TRL's SFTConfig.max_length default (a test compares them)


class PlanError(ValueError):
    """The workload cannot be planned as given; the message says what to change."""


# ----------------------------------------------------------------------------- results


@dataclasses.dataclass
class PlannedGraph:
    """One graph the workload compiles (``count`` > 1 when a shape is split by graph breaks)."""

    kind: str  # "prefill", "decode", "train" or "vision"
    batch_size: int
    tokens: int  # for "vision": the image's pixels, height x width (or the bucket's patches, see below)
    count: int
    image_size: tuple[int, int] | None = None  # "vision" only: (height, width) of the processed image
    #: "vision" of a tower that takes the images' grid: the graph is the bucket of patch counts, for these sizes
    bucket_of: tuple[tuple[int, int], ...] = ()

    @property
    def input_ids(self) -> list[int]:
        return [self.batch_size, self.tokens]

    def describe(self) -> str:
        if self.kind == "vision" and self.bucket_of:
            sized = ", ".join(f"{h}x{w}" for h, w in self.bucket_of)
            return f"patches [{self.tokens}] (batch {self.batch_size} of {sized})"
        if self.kind == "vision":
            return f"pixel_values [{self.batch_size}, 3, {self.image_size[0]}, {self.image_size[1]}]"
        return f"input_ids [{self.batch_size}, {self.tokens}]"


@dataclasses.dataclass
class MemoryEstimate:
    """Bytes per NeuronCore (one tensor-parallel rank)."""

    weights: int
    kv_cache: int = 0
    activations: int = 0
    gradients: int = 0
    optimizer: int = 0
    device_bytes: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.gradients + self.optimizer

    @property
    def fits(self) -> bool:
        return self.total <= self.device_bytes


@dataclasses.dataclass
class Plan:
    workload: str  # "generation" or "training"
    model_type: str
    dtype: str
    tp: int
    graphs: list[PlannedGraph]
    memory: MemoryEstimate
    device: str
    compiled: bool = True
    eager_reason: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    #: What the plan says of a vision-language model's image path (its graphs, sizes, what was not traced).
    vision_notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def graph_count(self) -> int:
        """Graphs each rank compiles."""
        return sum(g.count for g in self.graphs)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["graph_count"] = self.graph_count
        out["memory"]["total"] = self.memory.total
        out["memory"]["fits"] = self.memory.fits
        return out

    def render(self) -> str:
        """The plan as the CLI prints it."""
        per = " per rank" if self.tp > 1 else ""
        lines = [f"{self.workload} plan: {self.model_type} ({self.dtype}), tensor parallel {self.tp}"]
        if not self.compiled:
            lines.append(f"  runs uncompiled (eager): {self.eager_reason}")
        lines.append(f"  graphs{per}: {self.graph_count}")
        for g in self.graphs:
            split = f"  ({g.count} graphs: graph breaks)" if g.count > 1 else ""
            lines.append(f"    {g.kind:<8} {g.describe()}{split}")
        m = self.memory
        lines.append(f"  device memory{per} (NeuronCore of {self.device}: {format_bytes(m.device_bytes)}):")
        for label, value in (("weights", m.weights), ("KV cache", m.kv_cache), ("activations", m.activations),
                             ("gradients", m.gradients), ("AdamW state", m.optimizer)):
            if value:
                lines.append(f"    {label:<12} {format_bytes(value)}")
        verdict = "fits" if m.fits else "does NOT fit"
        lines.append(f"    {'total':<12} {format_bytes(m.total)}: {verdict} ({100 * m.total / max(m.device_bytes, 1):.1f}% of the core)")
        lines.extend(f"  note: {n}" for n in self.notes + self.vision_notes)
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    """``n`` bytes in GiB, MiB or KiB, as the plans print them."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / 1024:.1f} KiB"


# ----------------------------------------------------------------------------- inputs


def load_config(source):
    """A Transformers config from a local model folder, a ``config.json`` file, or a config object."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(source, PretrainedConfig):
        return source
    path = Path(source)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PlanError(f"{path} has no config.json: pass a model folder saved with save_pretrained, or a config file")
        return AutoConfig.from_pretrained(path)
    if path.is_file():
        data = json.loads(path.read_text())
        if "model_type" not in data:
            raise PlanError(f"{path} has no model_type: pass a Transformers config.json")
        return AutoConfig.for_model(**data)
    raise PlanError(f"{source}: no such model folder or config file (MODEL is a local folder or a config.json)")


def device_bytes(instance: str = "trn2", logical_nc_config: int = 2) -> int:
    """HBM of one logical NeuronCore: 24 GiB on trn2 at LNC=2, 36 GiB on trn3."""
    from hf_neuron.simulator.config import HBM_GIB_PER_CHIP, PHYSICAL_CORES_PER_CHIP

    if instance not in HBM_GIB_PER_CHIP:
        raise PlanError(f"unknown instance family {instance!r}: use one of {sorted(HBM_GIB_PER_CHIP)}")
    if logical_nc_config not in (1, 2):
        raise PlanError(f"logical NeuronCore config {logical_nc_config}: TorchNeuron supports 1 or 2")
    return (HBM_GIB_PER_CHIP[instance] << 30) // (PHYSICAL_CORES_PER_CHIP // logical_nc_config)


#: Quantization methods whose checkpoints Transformers dequantizes to bfloat16 while loading them on a device
#: without their kernels (a neuron device: its quantizers keep the quantized weights for CUDA, XPU or CPU).
DEQUANTIZED_ON_NEURON = ("mxfp4", "fp8")


def quantization_method(config) -> str | None:
    """The ``quant_method`` of ``config``'s ``quantization_config`` (None for an unquantized checkpoint)."""
    quantization = getattr(config, "quantization_config", None)
    if quantization is None:
        return None
    method = quantization.get("quant_method") if isinstance(quantization, dict) else getattr(quantization, "quant_method", None)
    return str(getattr(method, "value", method)) if method is not None else "unknown"


def quantization_note(config, dtype: torch.dtype) -> str | None:
    """How the checkpoint's quantization was sized (None when it has none)."""
    method = quantization_method(config)
    if method is None:
        return None
    dtype_name = str(dtype).removeprefix("torch.")
    if method in DEQUANTIZED_ON_NEURON:
        return (f"quantization_config {method}: Transformers has no {method} kernels for a neuron device and "
                f"dequantizes the weights to bfloat16 while loading them; sized in {dtype_name}")
    return (f"quantization_config {method}: how Transformers loads it on a neuron device is not known to hf_neuron; "
            f"sized unquantized, in {dtype_name}")


#: The usual short names of the dtypes a plan takes.
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def resolve_dtype(config, dtype) -> torch.dtype:
    """The dtype the weights are sized in: ``dtype`` (a name, an alias such as ``bf16``, or a torch dtype),
    else the config's, else float32 (what Transformers loads a config without one in); a checkpoint
    quantized in a way Transformers dequantizes on Neuron is bfloat16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None and quantization_method(config) in DEQUANTIZED_ON_NEURON:
        return torch.bfloat16  # what a neuron device loads (see quantization_note)
    name = dtype or getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
    if isinstance(name, torch.dtype):
        return name
    name = str(name).removeprefix("torch.")
    resolved = getattr(torch, DTYPE_ALIASES.get(name.lower(), name), None)
    if not isinstance(resolved, torch.dtype):
        raise PlanError(f"unknown dtype {name!r}: use float32, bfloat16 or float16 (or fp32, bf16, fp16)")
    return resolved


def meta_model(config, dtype: torch.dtype):
    """The model of ``config`` on the meta device: shapes only, no memory, nothing read."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    # A vision-language type without a causal-LM class (LLaVA, Qwen-VL) is its image-text-to-text class.
    auto = AutoModelForCausalLM if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or not vision_language(config) \
        else AutoModelForImageTextToText
    with torch.device("meta"):
        return auto.from_config(config, dtype=dtype)


def vision_language(config) -> bool:
    """Whether ``config`` is a vision-language model's (an image-text-to-text class with a vision tower)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return getattr(config, "vision_config", None) is not None and config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def native_image_size(config) -> tuple[int, int] | None:
    """The vision tower's own square input (what a fixed-size processor resizes every image to), if it has one."""
    size = getattr(config.vision_config, "image_size", None)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return int(size[0]), int(size[1])
    return (int(size), int(size)) if isinstance(size, int) else None


def _trace_vision(vlm, batch_size: int, image_size: tuple[int, int], dtype) -> tuple[int, int]:
    """(graphs, activation peak) of the vision tower on one batch of processed images, on the meta device."""
    from hf_neuron.transformers.generation.image_inputs import install_output_hooks_before_tracing

    install_output_hooks_before_tracing(vlm)  # as generate does: no graph break at the first trace
    backend = _RecordingBackend()
    encode = torch.compile(vlm.model.get_image_features, backend=backend, dynamic=False)
    pixels = torch.zeros(batch_size, 3, *image_size, dtype=dtype, device="meta")
    with torch.no_grad():
        encode(pixel_values=pixels)
    return backend.graphs, backend.peak


def _plan_vision(plan: Plan, config, torch_dtype, sizes, image_sizes, tp: int) -> None:
    """Add the vision tower's graphs (one per batch size and image size, or bucket) and weights to ``plan``."""
    from transformers import AutoModelForImageTextToText

    from hf_neuron.transformers.generation.vision_grid import grid_tower

    with torch.device("meta"):
        vlm = AutoModelForImageTextToText.from_config(config, dtype=torch_dtype)
    plan.memory.weights = weight_bytes(vlm, tp)
    if not image_sizes:
        native = native_image_size(config)
        if native is None:
            plan.vision_notes.append("this model takes images at sizes its processor decides (dynamic resolution): "
                                     "give --image-size HxW per processed size to plan its vision graphs")
            return
        image_sizes = [native]
    tower = grid_tower(vlm.model)
    if tower is not None:
        _plan_grid_vision(plan, tower, sizes, image_sizes)
        return
    untraced = None
    for batch in sizes:
        for image_size in image_sizes:
            try:
                graphs, peak = _trace_vision(vlm, batch, image_size, torch_dtype)
            except Exception as e:  # an op the meta device cannot run: one graph per size, as generate compiles it
                untraced = untraced or f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                graphs, peak = 1, 0
            plan.graphs.append(PlannedGraph("vision", batch, image_size[0] * image_size[1], graphs, tuple(image_size)))
            plan.memory.activations = max(plan.memory.activations, peak)
    sized = ", ".join(f"{h}x{w}" for h, w in image_sizes)
    plan.vision_notes.append(f"prompts with images also compile the vision tower once per batch size and processed "
                             f"image size ({sized}); the processor's resize decides the size, so every image a "
                             f"fixed-size processor resizes shares one graph")
    if untraced:
        plan.vision_notes.append(f"vision tower not traced on the meta device ({untraced}): one graph per size "
                                 "assumed, activations not included")


def _plan_grid_vision(plan: Plan, tower, sizes, image_sizes) -> None:
    """A tower that takes the images' grid (Qwen-VL) compiles once per batch size and bucket of patch
    counts (:mod:`hf_neuron.transformers.generation.vision_grid`), whatever the sizes in a bucket."""
    from hf_neuron.transformers.generation.vision_grid import bucket_patches, merge_unit

    patch = int(tower.config.patch_size)
    unit = merge_unit(tower)
    for batch in sizes:
        buckets: dict[int, list[tuple[int, int]]] = {}
        for height, width in image_sizes:
            patches = batch * (height // patch) * (width // patch)  # one image per prompt
            buckets.setdefault(bucket_patches(max(patches, 1), unit), []).append((height, width))
        for bucket, members in buckets.items():
            plan.graphs.append(PlannedGraph("vision", batch, bucket, 1, members[0], bucket_of=tuple(members)))
    plan.vision_notes.append(
        f"this vision tower takes the images' grid: it compiles once per batch size and bucket of patch counts (the "
        f"patches plus one merged token, rounded up to 2, 3, 4, 6, 8, 12... merged tokens of {unit} patches of "
        f"{patch}x{patch} pixels); image sizes in one bucket share its graph; its activations are not traced here "
        f"and are left out of the memory")


def _planned_model(config, dtype, tp: int):
    """``(dtype, meta model)`` for a plan, after checking that the model shards ``tp`` ways."""
    torch_dtype = resolve_dtype(config, dtype)
    model = meta_model(config, torch_dtype)
    _check_tp(model, _positive("tp", tp))
    return torch_dtype, model


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PlanError(f"{name} must be a positive integer; got {value!r}")
    return value


# ----------------------------------------------------------------------------- meta tracing


def _storage_bytes(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes()


class _PeakTensorBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Peak bytes of the storages created while active: a storage counts once, from the op that creates
    it until the last tensor viewing it is gone (views, in-place results and inputs are not new memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage -> [bytes, tensors viewing it]
        self.total = 0
        self.peak = 0

    def _release(self, storage: int) -> None:
        entry = self.live[storage]
        entry[1] -= 1
        if entry[1] == 0:
            self.total -= entry[0]
            del self.live[storage]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import torch.utils._pytree as pytree

        out = func(*args, **(kwargs or {}))
        inputs = {x.untyped_storage()._cdata for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)}
        for value in pytree.tree_leaves(out):
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            key = storage._cdata
            if key in self.live:
                self.live[key][1] += 1
            elif key in inputs:
                continue  # memory that existed before this op (weights, the cache, an input)
            else:
                self.live[key] = [storage.nbytes(), 1]
                self.total += storage.nbytes()
                self.peak = max(self.peak, self.total)
            weakref.finalize(value, self._release, key)
        return out


class _RecordingBackend:
    """A Dynamo backend that counts graphs and measures each one's peak on meta tensors; compiles nothing."""

    def __init__(self) -> None:
        self.graphs = 0
        self.peak = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1

        def run(*args):
            with _PeakTensorBytes() as measured:
                result = gm.forward(*args)
            self.peak = max(self.peak, measured.peak)
            return result

        return run


@contextlib.contextmanager
def _fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=64):
            yield
    finally:
        torch._dynamo.reset()


def _cache_bytes(cache) -> int:
    total = 0
    for layer in getattr(cache, "layers", ()):
        tensors = [getattr(layer, name, None) for name in ("keys", "values", "indexer_keys")]
        for name in ("conv_states", "recurrent_states"):
            tensors += list((getattr(layer, name, None) or {}).values())
        total += sum(_storage_bytes(t) for t in tensors if isinstance(t, torch.Tensor))
    return total


def _trace_generation(model, cache, batch_size: int, chunk: int, decode: bool = True) -> tuple[int, int | None, int]:
    """(prefill graphs, decode graphs, activation peak) of one batch size, traced on the meta device.

    ``decode=False`` traces the prefill chunk alone (decode graphs ``None``): the decode step is the same
    whatever chunk came before it, so one trace of it per batch size is enough."""
    backend = _RecordingBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    prefill_step, decode_step = generation_steps(chunk)
    counts = []
    with torch.no_grad():
        for start, tokens in (prefill_step, decode_step) if decode else (prefill_step,):
            before = backend.graphs
            compiled(**step_inputs(cache, batch_size, start, tokens, torch.device("meta")))
            counts.append(backend.graphs - before)
    return counts[0], counts[1] if decode else None, backend.peak


# ----------------------------------------------------------------------------- weights


def _tp_patterns(model, tp_plan: dict | None = None) -> list[re.Pattern]:
    plan = tp_plan if tp_plan is not None else getattr(model, "_tp_plan", None) or {}
    return [re.compile("^" + re.escape(key).replace(r"\*", r"\d+") + r"(\.|$)") for key in plan]


def kv_cache_bytes(model, batch_size: int, max_cache_len: int, chunk: int) -> int:
    """Bytes of the static cache ``generate`` allocates for ``model`` (on the meta device: nothing allocated)."""
    return _cache_bytes(chunked_prefill_cache(model, batch_size, max_cache_len, chunk, torch.device("meta")))


def default_ep_size(config, tp: int) -> int:
    """The expert-parallel size hf_neuron gives ``DistributedConfig(tp_size=tp)`` on Neuron: the TP group,
    when ``tp`` divides the routed experts (a dense model, or one ``tp`` does not divide: 1)."""
    from hf_neuron.transformers.tensor_parallel.experts import routed_expert_count

    experts = routed_expert_count(config)
    return tp if tp > 1 and experts and experts % tp == 0 else 1


def weight_bytes(model, tp: int, tp_plan: dict | None = None, *, ep: int | None = None, fsdp: int = 1,
                 buffers: bool = True, select=None) -> int:
    """Parameter (and buffer) bytes one rank holds under ``DistributedConfig(tp_size=tp, fsdp_size=fsdp,
    ep_size=ep)``: modules in the model's TP plan (or ``tp_plan``, keys relative to the model) are split
    ``tp`` ways; routed experts ``ep`` ways when ``ep > 1`` (default: hf_neuron's choice, the TP group when
    it divides the experts); with FSDP every parameter is further sharded over the ``fsdp`` ranks (experts
    over the ranks their expert-parallel group leaves: ``tp * fsdp / ep``). ``select``: only the tensors
    whose name it accepts."""
    return sum(nbytes for name, nbytes in rank_tensor_bytes(model, tp, tp_plan, ep=ep, fsdp=fsdp, buffers=buffers)
               if select is None or select(name))


def rank_tensor_bytes(model, tp: int, tp_plan: dict | None = None, *, ep: int | None = None, fsdp: int = 1,
                      buffers: bool = True) -> list[tuple[str, int]]:
    """``(name, bytes one rank holds)`` of every parameter (and buffer) under the layout :func:`weight_bytes`
    sums."""
    from hf_neuron.transformers.tensor_parallel.experts import is_expert_parameter

    ep = default_ep_size(model.config, tp) if ep is None else ep
    patterns = _tp_patterns(model, tp_plan) if tp > 1 else []
    tensors = list(model.named_parameters()) + (list(model.named_buffers()) if buffers else [])
    held = []
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if ep > 1 and is_expert_parameter(name):
            nbytes = math.ceil(nbytes / ep / max(1, tp * fsdp // ep))
        else:
            if patterns and any(p.match(name) for p in patterns):
                nbytes = math.ceil(nbytes / tp)
            nbytes = math.ceil(nbytes / fsdp)
        held.append((name, nbytes))
    return held


def _check_tp(model, tp: int) -> None:
    if tp == 1:
        return
    if not getattr(model, "_tp_plan", None):
        raise PlanError(f"{model.config.model_type} has no tensor-parallel plan (base_model_tp_plan): plan it with --tp 1")
    text = model.config.get_text_config(decoder=True)
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(text, name, None)
        if isinstance(heads, int) and heads % tp:
            raise PlanError(f"{name}={heads} does not divide by tp={tp}: pick a tensor-parallel size that divides it")


# ----------------------------------------------------------------------------- plans


def plan_generation(
    source,
    batch_sizes=(1,),
    max_cache_len: int | None = None,
    prefill_chunk_size: int | list[int] | None = None,
    *,
    tp: int = 1,
    dtype=None,
    instance: str = "trn2",
    logical_nc_config: int = 2,
    image_sizes=None,
) -> Plan:
    """Graphs and memory of compiled greedy generation for each batch size (see the module docstring).

    ``image_sizes``: ``(height, width)`` of the processed images of a vision-language model (default: its
    vision tower's own input size, when it has one)."""
    config = load_config(source)
    sizes = sorted({_positive("batch size", b) for b in ([batch_sizes] if isinstance(batch_sizes, int) else batch_sizes)})
    if not sizes:
        raise PlanError("give at least one batch size, e.g. --batch-sizes 1,4")
    cache_len = _positive("max_cache_len", int(max_cache_len or DEFAULT_MAX_CACHE_LEN))
    try:
        buckets = check_prefill_buckets(resolve_prefill_buckets(prefill_chunk_size, cache_len), cache_len)
    except ValueError as e:
        raise PlanError(str(e)) from None
    # A bucket the cache cannot follow with a generated token is never run by generate.
    buckets = [b for b in buckets if b < cache_len]
    if not buckets:
        raise PlanError(f"prefill_chunk_size={prefill_chunk_size} leaves no room in max_cache_len={cache_len} for "
                        f"generated tokens")
    torch_dtype, model = _planned_model(config, dtype, tp)
    memory = MemoryEstimate(weights=weight_bytes(model, tp), device_bytes=device_bytes(instance, logical_nc_config))
    compiles, reason = generation_compiles(model)
    plan = Plan("generation", config.model_type, str(torch_dtype).removeprefix("torch."), tp, [], memory,
                f"{instance} at LNC={logical_nc_config}", compiles, reason)
    plan.notes += _weight_notes(config, tp, torch_dtype)
    if not compiles:
        plan.notes.append("no graph is compiled: every op runs eagerly (the slow path on Trainium)")
        return plan
    untraced = None
    with _fresh_dynamo():
        for batch in sizes:
            decode = None
            for chunk in buckets:
                cache = chunked_prefill_cache(model, batch, cache_len, chunk, torch.device("meta"))
                memory.kv_cache = max(memory.kv_cache, math.ceil(_cache_bytes(cache) / tp))
                try:
                    prefill, decoded, peak = _trace_generation(model, cache, batch, chunk, decode=decode is None)
                except Exception as e:  # an op the meta device cannot run: fall back to what generate guarantees
                    untraced = untraced or f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    prefill, decoded, peak = 1, 1, 0
                decode = decoded if decode is None else decode
                plan.graphs.append(PlannedGraph("prefill", batch, chunk, prefill))
                memory.activations = max(memory.activations, peak)
            plan.graphs.append(PlannedGraph("decode", batch, 1, decode))
    if untraced:
        plan.notes.append(
            f"not traced on the meta device ({untraced}): graphs are hf_neuron's guarantee for compiled generation "
            f"(one prefill-chunk and one decode graph per batch size) and activations are not included"
        )
    plan.notes.append(
        f"prompts are prefilled in chunks of {', '.join(map(str, buckets))} tokens (one graph each), left padded "
        f"to the fewest positions; every prompt with prompt + max_new_tokens <= max_cache_len={cache_len} uses "
        f"these graphs, a longer request raises before compiling"
    )
    plan.notes.append(
        "memory is that of one generate call: a finished call's static cache is freed when Python's garbage "
        "collector runs, so back-to-back calls can briefly hold one more KV cache"
    )
    if vision_language(config):
        _plan_vision(plan, config, torch_dtype, sizes, image_sizes, tp)
    elif image_sizes:
        raise PlanError(f"{config.model_type} takes no images (no vision tower): leave out --image-size")
    if tp > 1:
        plan.notes.append("activations are those of one unsharded rank (an upper bound under tensor parallelism)")
    return plan


def training_batch_shapes(max_length: int, per_device_batch: int, packing: bool,
                          packing_strategy: str = "bfd") -> list[tuple[int, int]]:
    """The ``input_ids`` shapes of a TRL SFT run on Neuron with hf_neuron (see the TRL adapter)."""
    if packing:
        if packing_strategy == "wrapped":
            return [(per_device_batch, max_length)]
        # "bfd" packs without padding: one row holding per_device_batch packs of max_length tokens
        return [(1, per_device_batch * max_length)]
    lengths = sorted({min(max_length, TRAINING_PAD_MULTIPLE * k)
                      for k in range(1, math.ceil(max_length / TRAINING_PAD_MULTIPLE) + 1)})
    return [(per_device_batch, n) for n in lengths]


def training_activations(config, dtype: torch.dtype, batch: int, tokens: int) -> int:
    """Peak activation bytes of a compiled training forward of ``config`` on one ``[batch, tokens]`` batch,
    traced on the meta device (a fresh Dynamo, as a new process has)."""
    with _fresh_dynamo():
        return _trace_training_memory(meta_model(config, dtype), batch, tokens)


def _trace_training_memory(model, batch: int, tokens: int) -> int:
    backend = _RecordingBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    ids = torch.zeros(batch, tokens, dtype=torch.long, device="meta")
    with torch.enable_grad():
        compiled(input_ids=ids, labels=ids, use_cache=False)
    return backend.peak


@contextlib.contextmanager
def _quiet():
    """The probe's trainer and dataset progress output is not the plan's."""
    import io

    import datasets
    import transformers

    verbosity = transformers.logging.get_verbosity()
    bars = datasets.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    datasets.utils.logging.disable_progress_bar()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            datasets.utils.logging.enable_progress_bar()


@contextlib.contextmanager
def _accelerate_state_kept():
    """accelerate's process-wide state as it was before the block. The counting step trains on CPU
    (``use_cpu=True``), and accelerate keeps the first device it is given for the whole process: a trainer
    the caller makes afterwards would train on CPU instead of Neuron."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    saved = [(kind, dict(kind._shared_state)) for kind in (PartialState, AcceleratorState, GradientState)]
    try:
        yield
    finally:
        for kind, state in saved:
            kind._shared_state.clear()
            kind._shared_state.update(state)


def sft_step_graphs(model_type: str, max_length: int = 32, per_device_batch: int = 1,
                    packing_strategy: str = "wrapped") -> int:
    """Dynamo graphs of one TRL SFT training step of ``model_type``, counted on CPU at the tiny size.

    The number of graphs of a step depends on the architecture's code and TRL's loss path (graph
    breaks), not on the size or the device, so one real step of a tiny random model of the same
    architecture, compiled with Dynamo's ``eager`` backend on CPU, counts them without compiling
    anything for a device.
    """
    import tempfile

    from datasets import Dataset
    from torch._dynamo.utils import counters
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    from hf_neuron.tiny_models import build_tokenizer, tiny_config

    config = tiny_config(model_type)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    rows = [{"input_ids": [3 + (i * 7 + j) % (config.vocab_size - 3) for j in range(max_length + 5)]}
            for i in range(per_device_batch * 2)]
    with tempfile.TemporaryDirectory() as out, _fresh_dynamo(), _quiet(), _accelerate_state_kept():
        args = SFTConfig(
            output_dir=out, use_cpu=True, max_steps=1, per_device_train_batch_size=per_device_batch,
            max_length=max_length, packing=True, packing_strategy=packing_strategy, torch_compile=True,
            torch_compile_backend="eager", report_to="none", save_strategy="no", logging_steps=100,
            disable_tqdm=True, dataloader_num_workers=0,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=build_tokenizer())
        start = int(counters["stats"]["unique_graphs"])
        trainer.train()
        return int(counters["stats"]["unique_graphs"]) - start


def plan_training(
    source,
    max_length: int | None = None,
    per_device_batch: int = 1,
    *,
    packing: bool = False,
    packing_strategy: str = "bfd",
    tp: int = 1,
    dtype=None,
    instance: str = "trn2",
    logical_nc_config: int = 2,
) -> Plan:
    """Graphs and memory of a TRL SFT run with ``torch_compile`` on Neuron (see the module docstring).

    ``max_length`` defaults to TRL's (``DEFAULT_SFT_MAX_LENGTH``); a step's graphs are counted with one
    tiny SFT step of the architecture.
    """
    config = load_config(source)
    max_length = _positive("max_length", DEFAULT_SFT_MAX_LENGTH if max_length is None else max_length)
    _positive("per_device_batch", per_device_batch)
    if packing_strategy not in ("bfd", "wrapped"):
        raise PlanError(f"packing_strategy {packing_strategy!r}: TRL packs with 'bfd' or 'wrapped'")
    torch_dtype, model = _planned_model(config, dtype, tp)
    weights = weight_bytes(model, tp)
    trainable = weight_bytes(model, tp, buffers=False)
    shapes = training_batch_shapes(max_length, per_device_batch, packing, packing_strategy)
    per_step = sft_step_graphs(config.model_type, packing_strategy=packing_strategy if packing else "wrapped")
    with _fresh_dynamo():
        # The longest batch holds the most activations: it alone is traced.
        activations = _trace_training_memory(model, *max(shapes, key=lambda shape: shape[0] * shape[1]))
    memory = MemoryEstimate(weights=weights, activations=activations, gradients=trainable, optimizer=2 * trainable,
                            device_bytes=device_bytes(instance, logical_nc_config))
    plan = Plan("training", config.model_type, str(torch_dtype).removeprefix("torch."), tp,
                [PlannedGraph("train", b, n, per_step) for b, n in shapes], memory, f"{instance} at LNC={logical_nc_config}")
    plan.notes += _weight_notes(config, tp, torch_dtype)
    plan.notes.append(f"{per_step} graph(s) per training step and batch shape (forward; each with its backward), "
                      f"all compiled in the first steps")
    plan.notes.append("activations without activation checkpointing (an upper bound when it is on)")
    return plan


def _weight_notes(config, tp: int, dtype: torch.dtype) -> list[str]:
    """How the weights were sized: a quantized checkpoint's dtype, a mixture of experts' expert sharding."""
    from hf_neuron.transformers.tensor_parallel.experts import routed_expert_count

    notes = [note] if (note := quantization_note(config, dtype)) else []
    experts, ep = routed_expert_count(config), default_ep_size(config, tp)
    if experts and tp > 1:
        notes.append(f"routed experts ({experts} per MoE layer) sharded over the {ep} ranks of the TP group, "
                     f"{experts // ep} per rank (hf_neuron's default for tp_size={tp} on Neuron)" if ep > 1 else
                     f"routed experts ({experts} per MoE layer) replicated on every rank: tp={tp} does not divide them")
    return notes


def planned_shapes(plan: Plan) -> list[tuple[int, int]]:
    """The plan's graphs as ``input_ids`` shapes, one per graph, sorted (to compare with a graph log)."""
    return sorted(tuple(g.input_ids) for g in plan.graphs for _ in range(g.count))


__all__ = [
    "MemoryEstimate", "Plan", "PlanError", "PlannedGraph", "default_ep_size", "device_bytes", "format_bytes",
    "kv_cache_bytes", "load_config",
    "meta_model", "plan_generation", "resolve_dtype", "plan_training", "planned_shapes", "rank_tensor_bytes", "sft_step_graphs",
    "training_batch_shapes", "weight_bytes",
]
