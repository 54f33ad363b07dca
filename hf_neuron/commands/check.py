"""hf-neuron check MODEL: does this model run on Trainium, with which fixes, on how many NeuronCores?

MODEL is a local model folder, a config.json, or a Hub id already in the local Hugging Face cache (no
network, no weights read: seconds for a model of any size). The config is read as JSON into the
installed Transformers' own config class: a checkpoint's own code (trust_remote_code) is never imported
or run. The answer has three parts:

  verdict  its architecture's result in the compatibility results of the installed Transformers
           (levels passed, compiled or not, the failure reason), or "not tested" and how to test it
  plan     graphs and memory per NeuronCore at the smallest tensor-parallel degree that fits and
           that the model's heads divide (a mixture of experts: its experts sharded over the TP group),
           then TP x FSDP when TP alone cannot place it (expert parallelism across the FSDP ranks for a
           mixture of experts), the
           DistributedConfig and torchrun line for it, and the instance sizes with that many cores
  fixes    the hf_neuron fixes this architecture and task rely on, and where its TP plan comes from

exit status:
   0  runs compiled and fits        1  the architecture fails a level the task needs
   3  runs, but uncompiled (eager)  4  does not fit with tensor parallelism on this instance family
   5  not tested                    2  bad option (argparse)
  10  no such path                 11  folder without config.json    12  Hub id not in the local cache
  13  unknown model_type           14  unknown instance family        15  unreadable config
  16  not a text-generation model  17  config lacks a field sizing needs
  18  a Diffusers pipeline folder  19  --max-cache-len past the model's positions
  20  unknown --dtype               21  --image-size for a model without images, or with --task sft

examples:
  hf-neuron check ./my-checkpoint
  hf-neuron check meta-llama/Llama-3.1-8B --task sft --instance trn3 --json
  hf-neuron check Qwen/Qwen2.5-VL-7B-Instruct --image-size 448x448,896x672
"""

from __future__ import annotations

import argparse
import json
import sys

from hf_neuron.commands.plan import image_size_list

EXIT_STATUS = {
    "passes": 0, "fails": 1, "uncompiled": 3, "does_not_fit": 4, "not_tested": 5,
    "missing_path": 10, "no_config": 11, "not_in_cache": 12, "unknown_model_type": 13, "unknown_instance": 14,
    "bad_config": 15, "not_text_generation": 16, "missing_field": 17, "diffusers_pipeline": 18,
    "cache_too_long": 19, "bad_dtype": 20, "bad_images": 21, "bad_task": 2,
}
_MARK = {"pass": "✓", "fail": "✗", "skip": "–"}


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="does MODEL run on Trainium: verdict, plan, instance, fixes (seconds)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="local model folder, config.json, or Hub id in the local cache")
    p.add_argument("--task", choices=("generate", "sft"), default="generate",
                   help="generation (default) or TRL SFT training")
    p.add_argument("--instance", default="trn2", metavar="FAMILY",
                   help="Trainium instance family: trn2 (default), trn2u or trn3")
    p.add_argument("--batch-size", type=int, default=1, metavar="N",
                   help="generation batch size, or SFT batch per device (default: 1)")
    p.add_argument("--max-cache-len", type=int, default=None, metavar="N",
                   help="generation: static cache length (default: hf_neuron's 1024)")
    p.add_argument("--max-length", type=int, default=None, metavar="N", help="SFT: max_length (default: TRL's 1024)")
    p.add_argument("--image-size", dest="image_sizes", type=image_size_list, default=None, metavar="HxW,HxW",
                   help="vision-language model: the processed image sizes to plan its vision graphs at (default: "
                        "the tower's own input size; a dynamic-resolution tower needs them)")
    p.add_argument("--dtype", default=None,
                   help="float32, bfloat16 or float16, or fp32, bf16, fp16 (default: the config's)")
    p.add_argument("--json", action="store_true", help="print the check as JSON")
    p.set_defaults(func=run, device_free=True)


def run(args: argparse.Namespace) -> int:
    from hf_neuron.commands.output import upstream_warnings_silenced
    from hf_neuron.transformers.model_check import CheckError, check_model

    for name in ("batch_size", "max_cache_len", "max_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"hf-neuron check: error: --{name.replace('_', '-')} must be a positive integer, got {value}",
                  file=sys.stderr)
            return 2
    try:
        with upstream_warnings_silenced():  # sizing builds and traces models whose code logs for their users
            result = check_model(args.model, args.task, args.instance, dtype=args.dtype, batch_size=args.batch_size,
                                 max_cache_len=args.max_cache_len,
                                 max_length=args.max_length, image_sizes=args.image_sizes)
    except CheckError as exc:
        print(f"hf-neuron check: error: {exc}", file=sys.stderr)
        return EXIT_STATUS.get(exc.kind, 2)
    status = outcome(result)
    if args.json:
        print(json.dumps({**result.to_dict(), "outcome": status, "exit_status": EXIT_STATUS[status]}, indent=1))
    else:
        print(render(result, status))
    return EXIT_STATUS[status]


def outcome(result) -> str:
    """What the exit status reports: a failing or untested architecture first, then whether it fits."""
    if result.verdict.status in ("fails", "not_tested"):
        return result.verdict.status
    if not result.sizing.fits:
        return "does_not_fit"
    return result.verdict.status


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


_OUTCOME_LINE = {
    "passes": "runs compiled on Neuron and fits",
    "fails": "the architecture fails on Neuron",
    "uncompiled": "runs on Neuron, uncompiled (eager: the slow path on Trainium)",
    "does_not_fit": "does not fit with tensor parallelism on this instance family",
    "not_tested": "not tested on Neuron",
}


def _graph_shape(graph: dict) -> str:
    """A planned graph as its input's shape: tokens, an image's pixels, or a grid tower's patch bucket."""
    if graph.get("bucket_of"):
        return f"{graph['kind']} patches [{graph['tokens']}] (batch {graph['batch_size']})"
    if graph.get("image_size"):
        height, width = graph["image_size"]
        return f"{graph['kind']} [{graph['batch_size']}, 3, {height}, {width}]"
    return f"{graph['kind']} [{graph['batch_size']}, {graph['tokens']}]"


def render(result, status: str) -> str:
    from hf_neuron import instances
    from hf_neuron.transformers.model_check import TIGHT_MARGIN
    from hf_neuron.transformers.plan import format_bytes

    v, s = result.verdict, result.sizing
    task = "generation" if result.task == "generate" else "SFT training"
    lines = [f"{result.model_type}: {_OUTCOME_LINE[status]} ({task}, {result.instance})",
             f"  read from {result.source}", "", f"verdict: {v.summary}"]
    if v.levels:
        marks = "  ".join(f"{lv} {_MARK.get(st, '?')}" for lv, st in v.levels.items())
        lines.append(f"  transformers {v.transformers_version}, {v.device_kind} device ({v.results_file}): {marks}")
    lines += ["", f"plan: {s.parameters and _count(s.parameters)} parameters in {s.dtype} ({s.dtype_source}), "
                  f"{format_bytes(s.weights_total)} of weights"]
    tried = ", ".join(map(str, s.degrees_tried)) or "none"
    limit = f"; no higher: {s.limit}" if s.limit else ""
    if s.fits and s.fsdp > 1:
        lines.append(f"  tensor parallel {s.tp} x FSDP {s.fsdp} ({s.layout.ranks} ranks): the fewest ranks that fit "
                     f"(tensor parallelism alone does not: degrees the heads allow: {tried}{limit})")
    elif s.fits:
        lines.append(f"  tensor parallel {s.tp}: the smallest degree that fits (degrees the heads allow: {tried}{limit})")
    else:
        lines.append(f"  does not fit on one NeuronCore at any degree tried ({tried}{limit})")
    if s.distributed_config:
        experts = f"; routed experts sharded over {s.ep} ranks (expert parallelism)" if s.ep > 1 else ""
        lines.append(f"  layout: {s.distributed_config}{experts}")
        lines.append(f"  launch: {s.torchrun}")
    if s.graphs:
        shapes = ", ".join(_graph_shape(g) for g in s.graphs)
        lines.append(f"  graphs per rank: {s.graph_count} ({shapes})")
    elif not s.compiled:
        lines.append("  graphs: none (generate runs eagerly)")
    parts = ", ".join(f"{label} {format_bytes(s.per_core[key])}" for key, label in
                      (("weights", "weights"), ("gathered", "gathered"), ("kv_cache", "KV cache"),
                       ("activations", "activations"),
                       ("gradients", "gradients"), ("optimizer", "AdamW state")) if s.per_core.get(key))
    total = s.per_core.get("total", 0)
    lines.append(f"  per NeuronCore at {s.layout.label} ({format_bytes(s.device_bytes)} on {result.instance} at LNC=2): {parts} = "
                 f"{format_bytes(total)} ({100 * total / s.device_bytes:.0f}%)")
    if s.tight:
        lines.append(f"  tight: less than {TIGHT_MARGIN:.0%} of the core is left for the Neuron runtime's own memory "
                     "(TorchNeuron documents no figure; the margin is hf_neuron's): expect to need the next layout")
    if s.fits:
        if s.instances:
            lines.append(f"  instances with {s.layout.ranks} core(s) or more: " + ", ".join(
                f"{size.name} ({size.chips} chip(s), {size.devices()} cores)"
                for size in instances.INSTANCE_SIZES if size.name in s.instances))
        else:
            lines.append(f"  needs {s.chips} {result.instance} chip(s) ({s.layout.ranks} cores at LNC=2); the documentation "
                         f"names no {result.instance} instance size")
    note = f" ({result.tp_plan_note})" if result.tp_plan_note else ""
    lines += ["", f"tensor-parallel plan: {_PLAN_SOURCE[result.tp_plan]}{note}",
              f"fixes hf_neuron applies for this ({len(result.fixes)}; statuses on this install: hf-neuron env):"]
    width = max((len(f["name"]) for f in result.fixes), default=0)
    for scope, title in _FIX_GROUPS:
        group = [f for f in result.fixes if f["scope"] == scope]
        if group:
            lines.append(f"  {title.format(model_type=result.model_type)}:")
        for entry in group:
            gap = entry["gap"] if len(entry["gap"]) <= 100 else entry["gap"][:99] + "…"
            lines.append(f"    {entry['name']:<{width}}  {gap}")
    if s.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in s.notes]
    lines += ["", f"exit status {EXIT_STATUS[status]}: {status.replace('_', ' ')}"]
    return "\n".join(lines)


_FIX_GROUPS = (("model", "for {model_type}"), ("generation", "generation, every model"),
               ("training", "training, every model"), ("trl", "TRL SFT"), ("tensor_parallel", "tensor parallelism"),
               ("loading", "loading, every model"))
_PLAN_SOURCE = {"transformers": "Transformers' (base_model_tp_plan)", "hf_neuron": "hf_neuron's (Transformers ships none)",
                "none": "none"}
