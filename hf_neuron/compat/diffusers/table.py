"""Render the diffusers table (``compatibility/diffusers.md``) from the results the checks recorded.

``hf-neuron compat diffusers`` (:mod:`hf_neuron.compat.diffusers.run`) runs the checks, each writing
one file into a results directory (:data:`RESULT_FILES`), then renders the table with :func:`main` in
a process of its own; with ``--report-only`` it only renders. The table reads which plans and
``_repeated_blocks`` hf_neuron installed, so it is rendered where the diffusers adapter is active:
in a process with a neuron device (the simulator when there is no Trainium). Every cell comes from
a recorded run; nothing is typed by hand except the reasons in :mod:`hf_neuron.diffusers.unsupported`
and the example script's row.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path

CONV_GAP = "convolution_overrideable"

# What each check writes into the results directory.
RESULT_FILES = {
    "tp": "tp-neuron.json",  # tp_check on the neuron device (torchrun, 2 ranks)
    "tp_cpu": "tp-cpu.json",  # tp_check on CPU with gloo
    "compile": "compile.json",  # compile_check
    "pipelines": "pipelines.json",  # pipeline_check
    "benchmark": "benchmark.txt",  # what compile_benchmark printed
}
COMMAND = "hf-neuron compat diffusers"


def load_records(path) -> dict:
    """One check's records by class (or pipeline family); {} for a check not run yet."""
    if not path or not Path(path).exists():
        return {}
    with open(path) as f:
        data = json.load(f)
    key = "family" if data["results"] and "family" in data["results"][0] else "class"
    return {r[key]: r for r in data["results"]}


def all_transformer_classes() -> dict[str, type]:
    import diffusers  # noqa: F401  (activates the adapter)
    import diffusers.models.transformers as package
    from diffusers.models.modeling_utils import ModelMixin

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, ModelMixin) and obj.__module__ == module.__name__:
                found[name] = obj
    return dict(sorted(found.items()))


def tp_cell(record: dict | None) -> str:
    if not record:
        return ""
    if record.get("ok"):
        worst = max(record[m]["max_abs_diff"] for m in ("memory", "pretrained") if m in record)
        return f"pass ({worst:.0e})"
    if CONV_GAP in json.dumps(record, default=str):
        return "blocked: no conv on simulator"
    error = record.get("error") or next((record[m].get("error") for m in ("memory", "pretrained")
                                         if m in record and not record[m]["ok"]), "")
    return f"FAIL: {str(error)[:60]}"


def short_error(error: str) -> str:
    """The op or source line that broke a full graph, from Dynamo's message (else its first line)."""
    import re

    caused = re.search(r"Caused by: (.*?)\s+#\s+(\S+\.py:\d+) in (\w+)", error or "")
    if caused:
        return f"{caused.group(1).strip()[:60]} ({caused.group(2).rsplit('/', 1)[-1]} in {caused.group(3)})"
    return (error or "").strip().splitlines()[0][:100] if error else ""


def compile_cell(record: dict | None) -> tuple[str, str]:
    if not record:
        return "", ""
    if record.get("ok"):
        return "pass", f"{record['graphs_first_step']} graph(s), {record['graphs_later_steps']} recompiles"
    text = json.dumps(record, default=str)
    if CONV_GAP in text:
        return "blocked: no conv on simulator", ""
    eager = "pass" if record.get("eager") else "FAIL"
    return eager, f"fullgraph fails: {short_error(record.get('error', ''))}"


def pipeline_cells(record: dict) -> tuple[str, str, str]:
    """A tiny pipeline's eager, compiled and VAE-decode cells (empty for a pipeline not recorded)."""
    failed = f"FAIL: {str(record.get('error', ''))[:60]}" if record else ""
    eager = compiled_cell = vae_cell = failed
    if CONV_GAP in json.dumps(record, default=str):
        eager = compiled_cell = vae_cell = "blocked: no conv on simulator (VAE)"
    if record.get("eager"):
        eager = f"pass ({record['eager_max_abs_diff']:.0e})"
    if record.get("compiled"):
        compiled_cell = (f"pass ({record['compiled_max_abs_diff']:.0e}), {record['graphs']} graphs, "
                         f"{record['graphs_second_generation']} on regeneration")
    if record.get("vae_compiled"):
        vae_cell = (f"pass ({record['vae_compiled_max_abs_diff']:.0e}), {record['vae_decode_graphs']} graph(s), "
                    f"{record['vae_decode_graphs_second_generation']} on regeneration")
    return eager, compiled_cell, vae_cell


def render(tp: dict, tp_cpu: dict, compiled: dict, pipelines: dict, benchmark: str = "",
           subset: str | None = None) -> str:
    from hf_neuron.diffusers.repeated_blocks import installed_repeated_blocks
    from hf_neuron.diffusers.plan_registry import PLANS
    from hf_neuron.diffusers.tensor_parallel import plan_for
    from hf_neuron.diffusers.unsupported import NO_NEURON_PATH, NOT_COVERED_YET, UNSHARDABLE

    classes = all_transformer_classes()
    ours = [n for n in classes if n in PLANS]
    upstream = [n for n, c in classes.items() if c._tp_plan is not None and plan_for(c._tp_plan) is None]
    passed_neuron = [n for n in ours if tp.get(n, {}).get("ok")]
    passed_cpu = [n for n in ours if tp_cpu.get(n, {}).get("ok")]
    upstream_neuron = [n for n in upstream if tp.get(n, {}).get("ok")]
    upstream_cpu = [n for n in upstream if tp_cpu.get(n, {}).get("ok")]
    ours_blocks = installed_repeated_blocks()
    upstream_blocks = sum(1 for c in classes.values() if c._repeated_blocks) - len(ours_blocks)
    blocked = sum(1 for n in ours if CONV_GAP in json.dumps(tp.get(n, {}), default=str))
    lines = [
        "# diffusers on Neuron: tensor parallelism, regional compilation, pipelines",
        "",
        f"Generated by `{COMMAND}` from recorded runs: it runs every check (tensor parallelism under torchrun on "
        "the device and on CPU, regional compilation, tiny pipelines, the compile benchmark) and rewrites this file; "
        "`--report-only` re-renders it from `hf_neuron/compat/data/results/diffusers/`. About 8 minutes on 2 CPU "
        "cores with the simulator; `--quick` checks a few classes and pipelines in about 2 minutes (see Reproduce "
        "at the end).",
        "",
        *([f"**Quick subset, not the full table**: {subset}.", ""] if subset else []),
        f"- Transformer classes in diffusers: **{len(classes)}**. With a TP plan: **{len(upstream) + len(ours)}** "
        f"({len(upstream)} upstream, {len(ours)} from hf_neuron).",
        f"- hf_neuron plans with TP=2 output equal to TP=1 (both `enable_parallelism` and "
        f"`from_pretrained(parallel_config=)`, fp32, atol 1e-5): **{len(passed_neuron)}/{len(ours)}** on the "
        f"simulated device (backend `neuron`), **{len(passed_cpu)}/{len(ours)}** on CPU with gloo."
        + (f" {blocked} classes are blocked on the simulated device by a missing `aten::convolution`."
           if blocked else ""),
        f"- Upstream plans proven the same way: **{len(upstream_neuron)}/{len(upstream)}** on the simulated device, "
        f"**{len(upstream_cpu)}/{len(upstream)}** on CPU with gloo (the others have no tiny model in "
        "`hf_neuron.testing.tiny_diffusers` yet)." if upstream else "",
        f"- `_repeated_blocks`: upstream sets it on {upstream_blocks} classes; hf_neuron adds it to "
        f"{len(ours_blocks)} (every block-structured class that lacked it).",
        "",
        "## Per class",
        "",
        "TP plan: who ships it. TP=2: `pass (max abs diff)`. Eager / compiled: the tiny model on the device "
        "against CPU, then `compile_repeated_blocks(backend=\"neuron\", fullgraph=True, dynamic=False)` over a "
        "4-step loop (graphs at the first step: one per block structure and input shape; recompiles over the "
        "later steps).",
        "",
        "| class | TP plan | TP=2 == TP=1 (neuron) | TP=2 == TP=1 (CPU, gloo) | sharded share of block weights "
        "| repeated blocks | eager on device | compiled |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cls in classes.items():
        if name in PLANS:
            plan = "hf_neuron"
        elif cls._tp_plan is not None:
            plan = "upstream"
        else:
            plan = "none"
        blocks = "hf_neuron" if name in ours_blocks else ("upstream" if cls._repeated_blocks else "none")
        record = tp.get(name) or {}
        share = f"{record['sharded_fraction']:.0%}" if "sharded_fraction" in record else ""
        eager, compiled_cell = compile_cell(compiled.get(name))
        lines.append(f"| {name} | {plan} | {tp_cell(tp.get(name))} | {tp_cell(tp_cpu.get(name))} | {share} "
                     f"| {blocks} | {eager} | {compiled_cell} |")

    lines += [
        "",
        "## Per pipeline (tiny pipelines: transformer and VAE on the device, text encoder on CPU)",
        "",
        "| pipeline | transformer | TP plan | repeated blocks | eager == CPU | compiled == CPU | VAE decode compiled "
        "== CPU | TP=2 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    from hf_neuron.testing.tiny_pipelines import FAMILIES

    for family in FAMILIES:
        record = pipelines.get(family, {})
        transformer = FAMILIES[family].transformer
        cls = classes.get(transformer)
        plan = "hf_neuron" if transformer in PLANS else ("upstream" if cls is not None and cls._tp_plan else "none")
        blocks = "hf_neuron" if transformer in ours_blocks else "upstream"
        eager, compiled_cell, vae_cell = pipeline_cells(record)
        tp2 = tp_cell(tp.get(transformer))
        if tp2.startswith("blocked") and tp_cpu.get(transformer, {}).get("ok"):
            tp2 = f"transformer: {tp_cell(tp_cpu.get(transformer))} on CPU/gloo; {tp2}"
        elif tp2:
            tp2 = f"transformer: {tp2}"
        if family == "qwenimage21":
            # The whole recipe under torchrun, proven by tests/diffusers/test_tp_example_script.py.
            tp2 = (f"{tp2 + '; ' if tp2 else ''}pipeline: scripts/diffusers_tp_example.py, TP=2 image = TP=1 image "
                   "(every channel within 2 of 255), 0 graphs on the second image")
        lines.append(f"| {family} | {transformer} | {plan} | {blocks} | {eager} | {compiled_cell} | {vae_cell} "
                     f"| {tp2} |")

    lines += [
        "",
        "## Classes without a TP plan",
        "",
        "| class | why |",
        "|---|---|",
    ]
    for name in classes:
        if classes[name]._tp_plan is None:
            reason = UNSHARDABLE.get(name)
            if reason:
                why = f"cannot be sharded usefully: {reason}"
            elif name in NO_NEURON_PATH:
                why = f"no neuron path: {NO_NEURON_PATH[name]}"
            else:
                why = NOT_COVERED_YET.get(name, "not examined")
            lines.append(f"| {name} | {why} |")

    if benchmark:
        lines += [
            "",
            "## Regional vs whole-model compilation (`hf_neuron.compat.diffusers.compile_benchmark`, one run)",
            "",
            "Graphs and FX nodes the neuron backend compiled over a 4-step loop on the tiny models (2 blocks of "
            "each kind). The regional graphs hold one block each, so their size does not depend on the depth of the "
            "model, while a whole-model graph holds every block.",
            "",
            "```",
            *[line for line in benchmark.splitlines()
              if line.startswith(("class ", "4-step")) or " error: " in line or line[:1].isupper() and "  " in line],
            "```",
        ]
    lines += [
        "",
        "## How the plans work",
        "",
        "Plans are diffusers' own `_tp_plan` dicts (`colwise` / `rowwise` / `PackedColwiseParallel` / "
        "`PackedRowwiseParallel`), installed by the named fix `diffusers.tp_plan.<Class>` only while upstream's "
        "`_tp_plan` is None. Attention q/k/v are colwise and the output projection rowwise; FFN up/gate colwise, "
        "down rowwise; AdaLN modulation, embedders and the final layer stay replicated. What diffusers' mechanism "
        "lacks for these classes is added by `diffusers.tp_plan_support`, for hf_neuron's plans only: per-rank "
        "head counts for processors that split heads with `attn.heads`, RMSNorms over all heads "
        "(`rms_norm_across_heads`: Wan, LTX, HiDream) that all-reduce their mean of squares, rotary tables that "
        "span all heads (LTX, Mochi) sliced per rank, config-dependent packed widths (single-stream "
        "`proj_out`), and globs that skip ModuleList elements lacking a projection (SD3's last block).",
        "",
        "## Reproduce",
        "",
        "```",
        f"{COMMAND}                 # every check below, then this table "
        "(results in hf_neuron/compat/data/results/diffusers/)",
        f"{COMMAND} --report-only   # only re-render this table from those results",
        f"{COMMAND} --quick --output /tmp/diffusers.md   # a few classes and pipelines, for CI",
        "```",
        "",
        "The steps it runs, each a module you can also run alone (`--help`): "
        "`torchrun --standalone --nproc_per_node=2 -m hf_neuron.compat.diffusers.tp_check` on the neuron device "
        "and again with `--device cpu`, `python -m hf_neuron.compat.diffusers.compile_check`, "
        "`python -m hf_neuron.compat.diffusers.pipeline_check` and "
        "`python -m hf_neuron.compat.diffusers.compile_benchmark`. Without a Trainium device the neuron steps run "
        "on the simulator.",
        "",
    ]
    return "\n".join(lines)


def load_results(results_dir: str | Path) -> dict:
    """The recorded results in ``results_dir`` as :func:`render`'s keyword arguments (missing ones empty)."""
    results_dir = Path(results_dir)
    loaded = {key: load_records(results_dir / name) for key, name in RESULT_FILES.items() if key != "benchmark"}
    benchmark = results_dir / RESULT_FILES["benchmark"]
    loaded["compiled"] = loaded.pop("compile")
    loaded["benchmark"] = benchmark.read_text() if benchmark.exists() else ""
    return loaded


def write_table(results_dir: str | Path, output: str | Path, subset: str | None = None) -> Path:
    """Render the table from ``results_dir`` into ``output``; ``subset`` notes a partial (quick) run."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(**load_results(results_dir), subset=subset))
    return output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Render the diffusers table from a results directory.")
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--subset", help="the note for a partial (quick) run")
    args = parser.parse_args(argv)
    import torch

    if not (hasattr(torch, "neuron") and torch.neuron.is_available()):
        print("no neuron device in this process, so hf_neuron's diffusers adapter is off and the table would "
              "miss its plans and repeated blocks: run with HF_NEURON_SIMULATOR=1 or on Trainium", file=sys.stderr)
        return 2
    write_table(args.results_dir, args.output, args.subset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
