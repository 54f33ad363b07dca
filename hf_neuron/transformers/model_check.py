"""``hf-neuron check MODEL``: does this checkpoint run on Trainium, with which fixes, on how many cores?

The answer a user wants first is about *their* checkpoint. It is put together from what hf_neuron
already knows, without reading a weight or touching the network:

- the verdict of the checkpoint's architecture (its ``model_type``) in the committed compatibility
  results of the installed Transformers release (levels passed, compiled or not, the failure reason);
- the fixes hf_neuron applies for this architecture and task, and where its tensor-parallel plan comes
  from (Transformers', hf_neuron's, none);
- a plan at the smallest tensor-parallel degree that fits one NeuronCore and that the model's heads
  divide, and the instance sizes with that many cores.

Sizes come from the model built on the ``meta`` device (every parameter's shape, no memory), so any size
takes seconds. Graphs and activations are traced on the same architecture with the fewest layers that
keep every kind of layer (:func:`hf_neuron.tiny_models.configs.fewer_layers`): the layers of one kind
repeat the same graph and the same transient memory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from hf_neuron import instances
from hf_neuron.compat import results as R

#: Compatibility levels each task needs: load, forward = CPU, then compiled generation or training.
TASK_LEVELS = {"generate": ("L1", "L2", "L3"), "sft": ("L1", "L2", "L4")}
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)
#: The share of a NeuronCore's memory below which a fit is called tight. The Neuron runtime keeps part of
#: the HBM for itself (collectives' buffers, the loaded program); TorchNeuron documents no figure for it,
#: so this is hf_neuron's margin, said as such wherever it is used.
TIGHT_MARGIN = 0.10

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class CheckError(ValueError):
    """Input ``hf-neuron check`` cannot use. ``kind`` names what was wrong (the command's exit status
    depends on it); the message says what to pass instead."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ----------------------------------------------------------------------------- the model's config


def resolve_config(source: str):
    """``(config, where it was read)`` for a local folder, a ``config.json`` or a cached Hub id."""
    path = Path(os.path.expanduser(str(source)))
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file() and (path / "model_index.json").is_file():
            raise CheckError("diffusers_pipeline",
                             f"{path} is a Diffusers pipeline (model_index.json), not a Transformers checkpoint: "
                             "hf-neuron check sizes text generation and SFT; for pipelines, `hf-neuron compat "
                             "diffusers` tests tensor parallelism and regional compilation, and docs/diffusers.md "
                             "has the compile recipe")
        if not config_file.is_file():
            raise CheckError("no_config", f"{path} has no config.json: pass a model folder saved with "
                                          "save_pretrained (or a Hub snapshot), or the config.json itself")
        return _config_from_file(config_file), str(config_file)
    if path.is_file():
        return _config_from_file(path), str(path)
    if _looks_like_path(str(source)) or not _HUB_ID.match(str(source)):
        raise CheckError("missing_path", f"{source}: no such file or folder; MODEL is a local model folder, a "
                                         "config.json, or a Hub id already in the local Hugging Face cache")
    cached = _cached_hub_config(str(source))
    if cached is None:
        from huggingface_hub.constants import HF_HUB_CACHE

        raise CheckError("not_in_cache", f"{source}: no such local folder, and no Hub model {source} in the local "
                                         f"Hugging Face cache ({HF_HUB_CACHE}); hf-neuron check reads no network: "
                                         f"fetch its config first (hf download {source} config.json) or pass a "
                                         "local folder or config.json")
    return _config_from_file(Path(cached)), f"{source} (local Hugging Face cache)"


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or text.startswith((".", "/", "~")) or text.count("/") > 1


def _cached_hub_config(repo_id: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return found if isinstance(found, str) else None


def _config_from_file(path: Path):
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckError("bad_config", f"{path} is not a JSON config ({exc}): pass a Transformers config.json")
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise CheckError("bad_config", f"{path} has no model_type: pass a Transformers config.json")
    return config_from_dict(data, str(path))


def config_from_dict(data: dict, where: str = "the config"):
    from transformers import CONFIG_MAPPING, AutoConfig

    model_type = data["model_type"]
    if model_type not in CONFIG_MAPPING:
        import difflib

        import transformers

        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise CheckError("unknown_model_type",
                         f"{where}: model_type {model_type!r} is not known to the installed Transformers "
                         f"{transformers.__version__}{hint}; a newer Transformers may know it (pip install -U "
                         "transformers), or the checkpoint needs its own code (trust_remote_code), which "
                         "hf-neuron check cannot plan")
    fields = {k: v for k, v in data.items() if k != "model_type"}
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # noqa: BLE001 - a config the class rejects
        raise CheckError("bad_config", f"{where}: Transformers rejects this {model_type} config: "
                                       f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    model_class(config)
    _check_generation_head(data, where)
    _check_sized_fields(config, data, where)
    return config


#: The fields sizing reads from a (text) config: a checkpoint's config.json always has them, and the class
#: default Transformers would fill in for a missing one sizes another model.
SIZED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def _check_sized_fields(config, data: dict, where: str) -> None:
    """A field sizing needs that the config file lacks (the class default would silently stand in)."""
    try:
        text = config.get_text_config(decoder=True)
    except ValueError:
        text = config
    raw = next((sub for name, sub in data.items()  # the text config's own dict, when it is nested
                if isinstance(sub, dict) and getattr(config, name, None) is text), data)
    aliases = {canonical: [alias for alias, target in getattr(type(text), "attribute_map", {}).items()
                           if target == canonical] for canonical in SIZED_FIELDS}
    default = type(text)()
    for name in SIZED_FIELDS:
        if not hasattr(default, name):
            continue  # the architecture has no such field (attention-free models have no heads)
        if name not in raw and not any(alias in raw for alias in aliases[name]):
            raise CheckError("missing_field",
                             f"{where} has no {name}: the sizing needs it, and Transformers would use "
                             f"{type(text).__name__}'s default ({getattr(default, name)}), another model's size; "
                             "pass the checkpoint's complete config.json")


def _check_generation_head(data: dict, where: str) -> None:
    """A checkpoint whose own classes are not for generation (an encoder such as BERT with a masked-LM head)."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)

    architectures = data.get("architectures")
    if not isinstance(architectures, list) or not architectures or data.get("is_decoder"):
        return
    generating = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) | set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values())
    generating |= {name for names in generating if isinstance(names, tuple) for name in names}
    if any(name in generating or name.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel"))
           for name in architectures):
        return
    raise CheckError("not_text_generation",
                     f"{where}: its architectures are {', '.join(architectures)}, not a text-generation head: "
                     "hf-neuron check and plan size text generation and SFT of decoders; an encoder runs on Neuron "
                     "with device_map=\"neuron\" (hf_neuron's placement applies), unsized")


def model_class(config):
    """The class that generates text for ``config``: its causal-LM class, else its image-text-to-text one."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    for auto in (AutoModelForCausalLM, AutoModelForImageTextToText):
        if type(config) in auto._model_mapping:
            return auto
    raise CheckError("not_text_generation",
                     f"model_type {config.model_type!r} has no text-generation class in Transformers (causal LM "
                     "or image-text-to-text): hf-neuron check plans text generation and SFT only")


# ----------------------------------------------------------------------------- verdict


@dataclasses.dataclass
class Verdict:
    status: str  # "passes", "uncompiled", "fails", "not_tested"
    summary: str
    levels: dict[str, str]
    results_file: str | None
    transformers_version: str | None
    device_kind: str | None
    graphs: dict[str, Any] = dataclasses.field(default_factory=dict)
    failure: dict | None = None
    tp_level: str | None = None  # L5 (TP=2 = single device), when recorded


def results_for_installed(images: bool = False) -> tuple[dict | None, Path | None, str]:
    """The committed results of the installed Transformers release on this machine's device kind, else the
    nearest older release's (with a note), else none. ``images``: those of generation from images."""
    import transformers
    from packaging.version import Version

    from hf_neuron.compat import report
    from hf_neuron.compat.paths import COMMITTED_IMAGE_RESULTS_DIR

    kind = "trainium" if _real_trainium() else "simulated"
    installed = Version(transformers.__version__)
    candidates = []
    for path in report.results_files(COMMITTED_IMAGE_RESULTS_DIR if images else None):
        release, _, file_kind = path.stem.rpartition("-")
        if file_kind == kind:
            candidates.append((Version(release), path))
    exact = [p for v, p in candidates if v.release[:3] == installed.release[:3]]
    if exact:
        return R.load(exact[0]), exact[0], ""
    older = sorted(((v, p) for v, p in candidates if v <= installed), reverse=True)
    if older:
        v, path = older[0]
        return R.load(path), path, (f"no results for transformers {transformers.__version__} yet: these are "
                                    f"{v}'s (run hf-neuron compat to record yours)")
    return None, None, f"no compatibility results for transformers {transformers.__version__} on {kind}"


def _real_trainium() -> bool:
    from hf_neuron.simulator.activation import real_torch_neuronx_installed

    return real_torch_neuronx_installed()


def verdict(model_type: str, task: str, images: bool = False) -> Verdict:
    """The recorded verdict of ``model_type`` for ``task``; ``images``: of generation from prompts with images
    (the image-text-to-text results)."""
    results, path, note = results_for_installed(images)
    version = results["transformers_version"] if results else None
    kind = results["device_kind"] if results else None
    record = R.by_model_type(results).get(model_type) if results else None
    how = f"test it with: hf-neuron compat {'--images ' if images else ''}--arch {model_type}"
    # The image results are named as the text ones, in their own folder.
    name = None if path is None else (f"images/{path.name}" if images else path.name)
    if record is None:
        where = f"the compatibility results of transformers {version}" if results else "any compatibility results"
        return Verdict("not_tested", f"not tested: {model_type} is not in {where}; {how}", {}, name, version,
                       kind)
    levels = {lv: record["levels"].get(lv, "skip") for lv in R.LEVELS}
    graphs = {lv: record["graphs_compiled"].get(lv) for lv in ("L3", "L4")}
    base = dict(levels=levels, results_file=name, transformers_version=version, device_kind=kind,
                graphs=graphs, tp_level=levels.get("L5"))
    needed = TASK_LEVELS[task]
    failing = next((lv for lv in needed if levels[lv] == "fail"), None)
    if failing:
        failure = {"level": failing, **record["failures"].get(failing, {"reason": "not recorded", "op": None})}
        return Verdict("fails", f"fails {failing}: {R.trim(failure['reason'], 300)}", failure=failure, **base)
    skipped = next((lv for lv in needed if levels[lv] != "pass"), None)
    if skipped:
        reason = record["skip_reasons"].get(skipped, "not run")
        return Verdict("not_tested", f"{skipped} not run ({reason}); {how}", **base)
    suffix = f" ({note})" if note else ""
    if task == "generate" and R.generation_path(record) == "eager":
        why = record["details"].get("L3", {}).get("eager_reason") or "generate compiles nothing"
        return Verdict("uncompiled", f"runs, uncompiled: tokens equal CPU but {why}{suffix}", **base)
    what = "compiled training step" if task == "sft" else "compiled generation" + (" from images" if images else "")
    return Verdict("passes", f"passes {', '.join(needed)} ({what} equals CPU){suffix}", **base)


def _name(path: Path | None) -> str | None:
    return path.name if path else None


# ----------------------------------------------------------------------------- fixes and TP plan


def tp_plan_source(config) -> tuple[str, dict | None, str | None]:
    """``(source, plan keys relative to the model or None, why not)``: source is "transformers",
    "hf_neuron" or "none"."""
    from hf_neuron.transformers.tensor_parallel.plans import PLANS

    text = config.get_text_config(decoder=True)
    upstream = getattr(type(text), "base_model_tp_plan", None) or getattr(text, "base_model_tp_plan", None)
    if upstream:
        return "transformers", None, None
    ours = PLANS.get(text.model_type) or PLANS.get(config.model_type)
    if ours is not None:
        why = ours.applies(text) if ours.applies else None
        if why is None:
            return "hf_neuron", dict(ours.plan), None
        return "none", None, f"hf_neuron's plan does not cover this variant: {why}"
    return "none", None, "neither Transformers nor hf_neuron has a tensor-parallel plan for it"


def applicable_fixes(config, task: str, tp: int) -> list[dict]:
    from hf_neuron.transformers.fix_scope import fix_scope, fixes_for

    return [{"name": f.name, "scope": fix_scope(f), "gap": f.gap} for f in fixes_for(config, task, tp)]


# ----------------------------------------------------------------------------- sizing


@dataclasses.dataclass(frozen=True)
class Layout:
    """A distributed layout: tensor parallel ``tp``, FSDP ``fsdp`` (ranks = tp * fsdp), routed experts
    sharded ``ep`` ways (1: a dense model, or experts replicated)."""

    tp: int
    fsdp: int = 1
    ep: int = 1

    @property
    def ranks(self) -> int:
        return self.tp * self.fsdp

    @property
    def label(self) -> str:
        return f"TP={self.tp}" + (f" x FSDP={self.fsdp}" if self.fsdp > 1 else "")

    def distributed_config(self, config) -> str:
        """The ``DistributedConfig(...)`` that gives this layout on Neuron with hf_neuron (which shards the
        experts over the TP group by itself: ``ep_size`` is written only where it differs)."""
        from hf_neuron.transformers.plan import default_ep_size

        args = [f"tp_size={self.tp}"] + ([f"fsdp_size={self.fsdp}"] if self.fsdp > 1 else [])
        if self.ep != default_ep_size(config, self.tp):
            args.append(f"ep_size={self.ep}")
        return f"DistributedConfig({', '.join(args)})"

    def torchrun(self) -> str:
        return f"torchrun --nproc_per_node={self.ranks} your_script.py" if self.ranks > 1 else "python your_script.py"


@dataclasses.dataclass
class Sizing:
    tp: int | None  # the smallest degree that fits; None when none does
    dtype: str
    parameters: int
    weights_total: int  # bytes of every weight (one unsharded copy)
    per_core: dict[str, int]  # bytes per NeuronCore at ``tp`` (or at the largest degree tried)
    device_bytes: int
    graphs: list[dict]
    graph_count: int
    compiled: bool
    degrees_tried: list[int]
    limit: str | None = None  # why no larger degree was tried
    instances: list[str] = dataclasses.field(default_factory=list)
    chips: int | None = None
    traced_layers: int | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    totals: dict[int, int] = dataclasses.field(default_factory=dict)  # bytes per core at each TP degree tried
    experts: int = 0  # routed experts per MoE layer (0: dense)
    layout: Layout = Layout(1)  # the layout that fits (or the last one tried)
    distributed_config: str | None = None  # the line to use, when it fits at more than one rank
    torchrun: str | None = None
    layouts_tried: list[dict] = dataclasses.field(default_factory=list)  # {tp, fsdp, ep, total} in order
    dtype_source: str = ""  # where ``dtype`` comes from, in words

    @property
    def fits(self) -> bool:
        return self.tp is not None

    @property
    def fsdp(self) -> int:
        return self.layout.fsdp

    @property
    def ep(self) -> int:
        return self.layout.ep

    @property
    def tight(self) -> bool:
        """Fits, but with less than TIGHT_MARGIN of the core left for the Neuron runtime's own buffers."""
        return self.fits and self.per_core.get("total", 0) > (1 - TIGHT_MARGIN) * self.device_bytes


def _degrees(config, family: str, has_plan: bool, lnc: int) -> tuple[list[int], str | None]:
    text = config.get_text_config(decoder=True)
    heads = {name: getattr(text, name, None) for name in ("num_attention_heads", "num_key_value_heads")}
    largest = instances.max_devices(family, lnc)
    degrees, limit = [], None
    for tp in TP_DEGREES:
        if tp > largest:
            limit = limit or f"the largest {family} instance has {largest} cores"
            break
        if tp > 1 and not has_plan:
            limit = "no tensor-parallel plan"
            break
        bad = [f"{name}={n}" for name, n in heads.items() if isinstance(n, int) and n % tp]
        if bad:
            limit = limit or f"{', '.join(bad)} does not divide by {tp}"
            continue
        degrees.append(tp)
    return degrees, limit or f"{TP_DEGREES[-1]} is the largest degree ({largest} cores on the largest {family} instance)"


def size_model(config, task: str, family: str, *, dtype=None, batch_size: int = 1, max_cache_len: int | None = None,
               max_length: int | None = None,
               compiles: bool | None = None, lnc: int = 2, image_sizes=None) -> Sizing:
    """The smallest tensor-parallel degree at which ``task`` fits one NeuronCore of ``family``.

    ``image_sizes``: the processed image sizes a vision-language model's tower is planned at (default: the
    tower's own input size, where it has one), as ``hf-neuron plan --image-size`` plans them.

    hf_neuron's fixes are not applied in this process (it has no neuron device), and some of them are
    what makes an architecture compile (Mamba's static cache, for one). ``compiles`` (from the
    compatibility results, measured with the fixes) then says whether generate compiles; the graphs are
    those compiled generation guarantees: one per prefill bucket and one decode graph per batch size.
    """
    import torch

    from hf_neuron.tiny_models.configs import fewer_layers, layer_count
    from hf_neuron.transformers import plan as P
    from hf_neuron.transformers.tensor_parallel.experts import routed_expert_count
    from hf_neuron.transformers.generation.defaults import DEFAULT_MAX_CACHE_LEN, resolve_prefill_buckets

    torch_dtype = P.resolve_dtype(config, dtype)
    source, our_plan, _ = tp_plan_source(config)
    auto = model_class(config)
    with torch.device("meta"):
        model = auto.from_config(config, dtype=torch_dtype)
    parameters = sum(p.numel() for p in model.parameters())
    plan_keys = None
    if our_plan is not None:
        prefix = "" if model.base_model is model else f"{model.base_model_prefix}."
        plan_keys = {prefix + key: style for key, style in our_plan.items()}
    per_device = P.device_bytes(family, lnc)
    reduced, kept = fewer_layers(config)
    layers = layer_count(config)
    notes = [note] if (note := P.quantization_note(config, torch_dtype)) else []
    if task == "generate":
        cache_len = int(max_cache_len or DEFAULT_MAX_CACHE_LEN)
        buckets = [b for b in resolve_prefill_buckets(None, cache_len) if b < cache_len]
        traced = P.plan_generation(reduced, [batch_size], cache_len, dtype=torch_dtype, image_sizes=image_sizes)
        try:
            kv = P.kv_cache_bytes(model, batch_size, cache_len, buckets[-1])
        except Exception as exc:  # noqa: BLE001 - a cache only hf_neuron's fixes can allocate statically
            kv = 0
            notes.append(f"the static cache is not sized here ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:100]}): memory leaves it out")
        activations = traced.memory.activations
        compiled = traced.compiled if compiles is None else compiles
        if compiled and not traced.compiled:
            traced.graphs = [P.PlannedGraph("prefill", batch_size, b, 1) for b in buckets]
            traced.graphs.append(P.PlannedGraph("decode", batch_size, 1, 1))
            notes.append("generate compiles with hf_neuron's fixes (compatibility results), which this planner does "
                         "not apply: graphs are compiled generation's (one per prefill bucket, one decode), "
                         "activations are not included")
        elif not compiled:
            traced.graphs = []
        graphs = [dataclasses.asdict(g) for g in traced.graphs]
        graph_count = sum(g["count"] for g in graphs)
        notes += [n for n in traced.notes if n.startswith("not traced")] + traced.vision_notes
        fixed = {"kv_cache": kv, "activations": activations}
    else:
        # The graphs of a step as plan --train counts them (one tiny SFT step of the architecture).
        traced = P.plan_training(reduced, max_length, batch_size, dtype=torch_dtype)
        activations = _training_activations(traced, reduced, kept, layers, torch_dtype, notes)
        graphs = [dataclasses.asdict(g) for g in traced.graphs]
        compiled, graph_count = True, traced.graph_count
        fixed = {"activations": activations}
    degrees, limit = _degrees(config, family, source != "none", lnc)
    experts = routed_expert_count(config)
    chosen, per_core, totals, tried = None, {}, {}, []
    layout = Layout(1)
    for layout in _layouts(config, degrees, experts, instances.max_devices(family, lnc)):
        weights = P.weight_bytes(model, layout.tp, plan_keys, ep=layout.ep, fsdp=layout.fsdp)
        per_core = {"weights": weights}
        if layout.fsdp > 1:  # FSDP gathers one layer's weights at a time for its forward (and backward)
            per_core["gathered"] = _largest_layer_bytes(model, layout, plan_keys)
        if task == "sft":  # a gradient per weight, AdamW's two moments per weight, sharded as the weights
            gradients = P.weight_bytes(model, layout.tp, plan_keys, ep=layout.ep, fsdp=layout.fsdp, buffers=False)
            per_core.update(gradients=gradients, optimizer=2 * gradients)
        per_core.update({k: math.ceil(v / layout.tp) if k == "kv_cache" else v for k, v in fixed.items()})
        per_core["total"] = sum(per_core.values())
        if layout.fsdp == 1:
            totals[layout.tp] = per_core["total"]
        tried.append((layout, per_core["total"]))
        if per_core["total"] <= per_device:
            chosen = layout.tp
            break
    whole = P.weight_bytes(model, 1)
    sizing = Sizing(chosen, str(torch_dtype).removeprefix("torch."), parameters, whole, per_core,
                    per_device, graphs, graph_count, compiled, degrees, limit,
                    traced_layers=kept if kept != layers else None, notes=notes, totals=totals, experts=experts,
                    layout=layout, layouts_tried=[{**dataclasses.asdict(lay), "total": total} for lay, total in tried])
    if chosen is not None:
        sizing.instances = [s.name for s in instances.sizes_holding(family, layout.ranks, lnc)]
        sizing.chips = math.ceil(layout.ranks / instances.logical_cores_per_chip(lnc))
        if layout.ranks > 1:
            sizing.distributed_config, sizing.torchrun = layout.distributed_config(config), layout.torchrun()
    if experts:
        sizing.notes += _expert_notes(model, experts, layout, per_device)
    if chosen is not None:
        sizing.notes += _layout_notes(layout, task, family, lnc)
    sizing.dtype_source = _dtype_source(config, dtype)
    if torch_dtype == torch.float32 and dtype is None:
        sizing.notes += _bfloat16_note(tried, per_device, chosen, family, lnc)
    if kept is not None and kept != layers:
        sizing.notes.append(f"graphs and activations traced on {kept} of the {layers} layers (every kind of layer "
                            f"of the model; layers of one kind repeat the same graph and transient memory)")
    largest = chosen or (degrees[-1] if degrees else 1)
    if largest > 1 and not experts:
        split = P.weight_bytes(model, largest, plan_keys)
        replicated = (split - whole / largest) / (whole - whole / largest)
        if replicated > 0.2:
            sizing.notes.append(f"{replicated:.0%} of the weights are outside the tensor-parallel plan ({source}'s) and "
                                "are replicated on every core (for a mixture of experts: its experts)")
        if chosen is not None:
            sizing.notes.append("activations are those of one unsharded rank (an upper bound under tensor "
                                "parallelism)")
    return sizing


def _layouts(config, degrees: list[int], experts: int, largest: int):
    """The layouts to try: tensor parallelism at each degree the heads allow, smallest first (routed
    experts sharded over the TP group, as hf_neuron does on Neuron); then TP x FSDP, fewest ranks first,
    for a model the heads' cap on TP leaves too large, a mixture of experts with its experts sharded over
    every rank their count allows (expert parallelism across the FSDP ranks; FSDP also splits each
    expert's weights where the experts are fewer than the ranks). At equal ranks, the larger TP degree
    comes first."""
    from hf_neuron.transformers.plan import default_ep_size

    for tp in degrees:
        yield Layout(tp, 1, default_ep_size(config, tp))
    if not degrees or degrees[-1] == 1 and not experts:
        return  # no tensor-parallel plan: FSDP alone is not a layout Transformers' DistributedConfig shards
    ranks = 2
    while ranks <= largest:
        for tp in sorted((d for d in degrees if d < ranks and ranks % d == 0), reverse=True):
            # the largest expert-parallel group the layout and the expert count allow
            ep = max((size for size in range(tp, ranks + 1, tp) if ranks % size == 0 and experts % size == 0),
                     default=1) if experts else 1
            yield Layout(tp, ranks // tp, ep)
        ranks *= 2


def _dtype_source(config, dtype) -> str:
    """Where the sizing's dtype comes from, in words."""
    from hf_neuron.transformers.plan import DEQUANTIZED_ON_NEURON, quantization_method

    method = quantization_method(config)
    if dtype is not None:
        return "--dtype"
    if method in DEQUANTIZED_ON_NEURON:
        return f"the {method} checkpoint dequantized, as Transformers loads it on Neuron"
    if getattr(config, "dtype", None) or getattr(config, "torch_dtype", None):
        return "the config's torch_dtype"
    return "the config names no torch_dtype: float32, as Transformers loads it"


def _bfloat16_note(tried: list[tuple[Layout, int]], per_device: int, chosen: int | None, family: str,
                   lnc: int) -> list[str]:
    """Where the same model in bfloat16 (every weight, cache and activation half the bytes) would take fewer
    cores than in float32: the layout it would fit at."""
    for index, (layout, total) in enumerate(tried):
        if total / 2 <= per_device:
            if index == len(tried) - 1 and chosen is not None:
                return []  # the float32 layout already
            sizes = [size.name for size in instances.sizes_holding(family, layout.ranks, lnc)]
            return [f"sized in float32; in bfloat16 (--dtype bf16, half the bytes) it fits at {layout.label} "
                    f"({layout.ranks} core(s){': ' + sizes[0] if sizes else ''}) instead"]
    return []


def _largest_layer_bytes(model, layout: Layout, plan_keys) -> int:
    """The bytes one rank gathers for the largest decoder layer under FSDP: its TP and EP shard, whole."""
    from hf_neuron.transformers.plan import rank_tensor_bytes

    layers: dict[str, int] = {}
    for name, nbytes in rank_tensor_bytes(model, layout.tp, plan_keys, ep=layout.ep, buffers=False):
        if match := _LAYER.search(name):
            layers[match.group(0)] = layers.get(match.group(0), 0) + nbytes
    return max(layers.values(), default=0)


_LAYER = re.compile(r"^.*?\.\d+\.")


def _expert_notes(model, experts: int, layout: Layout, per_device: int) -> list[str]:
    """What the sizing assumed about the routed experts, and an expert too large for one core."""
    from hf_neuron.transformers.plan import format_bytes
    from hf_neuron.transformers.tensor_parallel.experts import is_expert_parameter

    expert_bytes = sum(p.numel() * p.element_size() for name, p in model.named_parameters() if is_expert_parameter(name))
    notes = [f"mixture of experts: {experts} routed experts per MoE layer, {format_bytes(expert_bytes)} of expert "
             f"weights; at this layout each rank holds {experts // layout.ep if layout.ep > 1 else experts} of them "
             + ("(replicated: no expert-parallel size the layout allows divides them)" if layout.ep == 1 else
                f"(expert parallelism over the {layout.ep} ranks of the TP group: hf_neuron's default for tp_size="
                f"{layout.tp} on Neuron)" if layout.fsdp == 1 else
                f"(expert parallelism over {layout.ep} ranks, across the FSDP ranks: ep_size={layout.ep})")]
    one_each = expert_bytes / experts  # every MoE layer's share with one expert per rank
    if one_each > per_device:
        notes.append(f"one expert of every MoE layer is {format_bytes(one_each)}, more than a NeuronCore holds: "
                     "expert parallelism alone cannot place it (Transformers' expert-parallel plans do not split "
                     "inside an expert); FSDP splits each expert's weights over the ranks the expert-parallel group "
                     "leaves" + (f" (here {layout.ranks // layout.ep} per expert)" if layout.ep > 1 and layout.fsdp > 1
                                 else ""))
    return notes


def _layout_notes(layout: Layout, task: str, family: str, lnc: int) -> list[str]:
    """What an FSDP layout means for the user, and how many copies of the layout the instance holds."""
    notes = []
    if layout.fsdp > 1:
        notes.append(f"FSDP {layout.fsdp}: every parameter is sharded over the FSDP ranks and each rank gathers one "
                     "layer at a time (counted as 'gathered'); " + (
                         "each rank trains on its own rows" if task == "sft" else
                         "each rank generates its own prompts, all ranks stepping together (the same number of "
                         "new tokens: set min_new_tokens); hf_neuron's tests train in this layout, generation in it "
                         "is not covered by them"))
    sizes = instances.sizes_holding(family, layout.ranks, lnc)
    if task == "generate" and sizes and sizes[0].devices(lnc) >= 2 * layout.ranks:
        copies = sizes[0].devices(lnc) // layout.ranks
        notes.append(f"{sizes[0].name} has {sizes[0].devices(lnc)} cores: {copies} copies of this layout serve "
                     f"side by side (data-parallel replicas, each its own torchrun job or process group)")
    return notes


def _training_activations(traced, reduced, kept: int | None, layers: int | None, dtype, notes: list[str]) -> int:
    """A training step keeps each layer's activations for its backward, so they grow with the depth. From
    ``traced`` (the plan of ``reduced``, the ``kept`` layers): where every layer is of one kind, a second
    trace at twice the depth gives one layer's share, extrapolated to all ``layers`` (the embeddings,
    logits and loss counted once, as ``plan --train`` on the whole model counts them); otherwise the
    traced peak scaled by ``layers / kept`` (an upper bound: those are counted once per ``kept`` layers)."""
    from hf_neuron.tiny_models.configs import with_layer_count
    from hf_neuron.transformers import plan as P

    measured = traced.memory.activations
    unchecked = ("without activation checkpointing (an upper bound: TRL's SFTConfig turns gradient_checkpointing "
                 "on by default)")
    if not kept or not layers or kept >= layers:
        notes.append(f"training activations {unchecked}")
        return measured
    deeper = with_layer_count(reduced, 2 * kept)
    if deeper is None:
        notes.append(f"training activations traced on the kept layers and scaled to every layer, {unchecked}")
        return math.ceil(measured * layers / kept)
    batch, tokens = max(((g.batch_size, g.tokens) for g in traced.graphs), key=lambda shape: shape[0] * shape[1])
    per_layer = (P.training_activations(deeper, dtype, batch, tokens) - measured) / kept
    notes.append(f"training activations traced at {kept} and {2 * kept} layers and extrapolated to {layers}, "
                 f"{unchecked}")
    return math.ceil(measured + per_layer * (layers - kept))


# ----------------------------------------------------------------------------- the whole check


@dataclasses.dataclass
class ModelCheck:
    model: str
    source: str
    model_type: str
    task: str
    instance: str
    verdict: Verdict
    tp_plan: str
    tp_plan_note: str | None
    fixes: list[dict]
    sizing: Sizing

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["sizing"]["fits"] = self.sizing.fits
        out["sizing"]["tight"] = self.sizing.tight
        return out


def _check_cache_length(config, task: str, max_cache_len: int | None, where: str) -> None:
    """A cache the user asked for that is longer than the model's positions."""
    text = config.get_text_config(decoder=True)
    positions = getattr(text, "max_position_embeddings", None)
    if task == "generate" and max_cache_len and isinstance(positions, int) and max_cache_len > positions:
        raise CheckError("cache_too_long",
                         f"--max-cache-len {max_cache_len} is longer than {where}'s max_position_embeddings "
                         f"({positions}): the model has no positions past it; pass --max-cache-len {positions} or less")


def check_model(source: str, task: str = "generate", instance: str = "trn2", *, dtype=None, batch_size: int = 1,
                max_cache_len: int | None = None, max_length: int | None = None,
                image_sizes=None) -> ModelCheck:
    if task not in TASK_LEVELS:
        raise CheckError("bad_task", f"task {task!r}: use generate or sft")
    if image_sizes and task != "generate":
        raise CheckError("bad_images", "--image-size sizes generation from images; --task sft plans text SFT: "
                                       "leave one out")
    if instance not in instances.FAMILIES:
        raise CheckError("unknown_instance", f"instance {instance!r} is not a Trainium family hf_neuron knows: use "
                                             f"one of {', '.join(instances.FAMILIES)}")
    from hf_neuron.patching import upstream_behaviour
    from hf_neuron.transformers import plan as P
    from hf_neuron.transformers.fix_scope import registered_fixes

    # The same answer with or without a neuron device in this process: sizes and traces are upstream's
    # (the compatibility results say what hf_neuron's fixes change), and nothing is decided here.
    with upstream_behaviour(*(f.name for f in registered_fixes())):
        config, where = resolve_config(source)  # refuses a config without a text-generation class
        _check_cache_length(config, task, max_cache_len, where)
        try:
            P.resolve_dtype(config, dtype)
        except P.PlanError as exc:
            raise CheckError("bad_dtype", str(exc)) from None
        found = verdict(config.model_type, task)
        from hf_neuron.transformers.plan import vision_language

        if image_sizes and not vision_language(config):
            raise CheckError("bad_images", f"{config.model_type} takes no images (no vision tower): leave out "
                                           "--image-size")

        if task == "generate" and found.status == "not_tested" and vision_language(config):
            # A vision-language type outside the text tables (LLaVA, Qwen-VL): its verdict is generation
            # from images.
            found = verdict(config.model_type, task, images=True)
        plan_source, _, plan_note = tp_plan_source(config)
        compiles = {"passes": True, "uncompiled": False}.get(found.status) if task == "generate" else None
        sizing = size_model(config, task, instance, dtype=dtype, batch_size=batch_size, max_cache_len=max_cache_len,
                            max_length=max_length, compiles=compiles,
                            image_sizes=image_sizes)
        fixes = applicable_fixes(config, task, sizing.tp or 1)
    return ModelCheck(str(source), where, config.model_type, task, instance, found, plan_source, plan_note, fixes,
                      sizing)


__all__ = ["CheckError", "ModelCheck", "Sizing", "TASK_LEVELS", "Verdict", "check_model", "config_from_dict",
           "resolve_config", "results_for_installed", "size_model", "tp_plan_source", "verdict"]
