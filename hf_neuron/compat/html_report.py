"""``hf-neuron compat report --html DIR``: the recorded results as one static, searchable page.

The Markdown tables (:mod:`.report`) show every architecture of every release at once; a reader
looking for one architecture, or for every one failing the same way, wants to search and filter
instead. This writes ``DIR/index.html``: one file with its CSS, its script and its data inline
(nothing fetched, so it works opened from disk, attached to a ticket or published as is). Its
numbers come from the helpers the Markdown pages use, so the two cannot disagree.

The rows are rendered here, in Python, for every release (one ``<tbody>`` each); the script only
shows one release at a time and hides the rows the search box and the filter leave out. The data
the script filters on is embedded as JSON (``<script type="application/json" id="compat-data">``),
one entry per row in row order, and doubles as a machine-readable copy of what the page shows.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from hf_neuron.compat import paths, report
from hf_neuron.compat import results as R

#: The filter's choices: value -> label. Every value but "all" is a boolean of each architecture's
#: entry in the embedded data, so the script needs no rule of its own.
FILTERS = {
    "all": "all",
    "passed": "passed (L1-L3 compiled)",
    "uncompiled": "runs uncompiled (L3 passes eagerly)",
    "failed": "failed (any level fails)",
    "tp": "tensor parallel (L5 passes)",
}
MARKS = {"pass": "✓", "fail": "✗", "skip": "–"}
DIFFUSERS_COLUMNS = ("TP=2 = TP=1 (neuron)", "TP=2 = TP=1 (CPU, gloo)", "sharded share of block weights",
                     "eager on device = CPU", "compiled = CPU", "VAE decode compiled = CPU")
TOOLTIP_CHARS = 600  # diffusers errors are whole Dynamo messages; the results files keep them in full


def write_site(directory, files=None, diffusers_dir=None) -> Path:
    """Write ``directory/index.html`` from ``files`` (default: the committed results, one per
    Transformers release) and the diffusers results in ``diffusers_dir`` (default: the committed
    ones); returns its path. Every input is read before anything is written, so a bad results file
    raises (ValueError, OSError) and leaves no partial page."""
    releases = load_releases(report.results_files() if files is None else files)
    diffusers = diffusers_rows(Path(diffusers_dir) if diffusers_dir is not None
                               else paths.COMMITTED_DIFFUSERS_RESULTS_DIR)
    page = render_page(releases, diffusers)
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file, not a folder")
    directory.mkdir(parents=True, exist_ok=True)
    index = directory / "index.html"
    tmp = index.with_name(f".{index.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(index)  # a reader (or a browser reloading) never sees half a page
    return index


# ---------------------------------------------------------------------------------------------- data


def load_results(path: Path) -> dict:
    """A results file, checked against the schema; every way it can be unreadable is one message
    that names the file (ValueError), or FileNotFoundError when there is none."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no results file {path}")
    try:
        return R.load(path)  # its schema errors already name the file
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a compatibility results file (not JSON: {exc})") from None


def load_releases(files) -> list[dict]:
    """One entry per results file, newest release first (the order of the release selector)."""
    loaded = [(Path(f), load_results(f)) for f in files]
    if not loaded:
        raise ValueError("no results files to show")
    loaded.sort(key=lambda item: report.release_order(item[1]["transformers_version"], item[1]["device_kind"],
                                                      item[0].name))
    fixes = fixes_by_model_type({rec["model_type"] for _, results in loaded for rec in results["architectures"]})
    return [release_entry(path, results, fixes) for path, results in loaded]


def fixes_by_model_type(model_types) -> dict[str, list[dict]]:
    """The fixes hf_neuron has for each architecture alone. They are this hf_neuron's fixes, not
    those of the version that wrote an older results file: the page answers "what does the
    installed hf_neuron do for this architecture"."""
    from hf_neuron.transformers.fix_scope import model_fixes

    return {t: [{"name": f.name, "gap": f.gap or ""} for f in model_fixes(t)] for t in sorted(model_types)}


def release_entry(path: Path, results: dict, fixes: dict[str, list[dict]]) -> dict:
    device = report.DEVICE_TITLES.get(results["device_kind"], results["device_kind"])
    return {
        "file": path.name,  # the name only: the page must not show where this machine keeps it
        "title": f"transformers {results['transformers_version']}, {device}",
        "torch_version": results["torch_version"],
        "hf_neuron_version": results.get("hf_neuron_version", "?"),
        "generated_at": results["generated_at"],
        "l3_check": results.get("l3_check"),
        "headline": report.headline_numbers(results),
        "architectures": [arch_entry(rec, fixes.get(rec["model_type"], [])) for rec in results["architectures"]],
    }


def arch_entry(rec: dict, fixes: list[dict]) -> dict:
    """One row's data. The booleans named like :data:`FILTERS` decide what each filter shows."""
    level, reason, op = report.failure_reason(rec)
    return {
        "model_type": rec["model_type"],
        "rank": rec.get("rank"),
        "tier": rec.get("tier"),
        "kind": rec.get("kind"),
        "levels": {lv: rec["levels"].get(lv) for lv in R.LEVELS},
        "notes": {lv: note for lv in R.LEVELS if (note := level_note(rec, lv))},
        "graphs": {lv: rec.get("graphs_compiled", {}).get(lv) for lv in ("L3", "L4")},
        "path": R.generation_path(rec),
        "failure_level": level,
        "reason": reason,
        "op": op,
        "fixes": fixes,
        "passed": R.passes_compiled(rec),
        "uncompiled": R.passes_uncompiled(rec),
        "failed": R.has_failure(rec),
        "tp": rec["levels"].get("L5") == "pass",
    }


def level_note(rec: dict, level: str) -> str:
    """What a level's mark explains on hover: the failure or the skip reason, else what was checked."""
    status = rec["levels"].get(level)
    if status == "fail":
        failure = rec["failures"].get(level) or {}
        op = f" (at {failure['op']})" if failure.get("op") else ""
        return f"{failure.get('reason', 'failed')}{op}"
    if status == "skip":
        return rec["skip_reasons"].get(level, "skipped")
    if status == "pass" and level == "L3" and R.passes_uncompiled(rec):
        why = rec["details"].get("L3", {}).get("eager_reason") or "reason not recorded"
        return f"tokens equal CPU, but generate compiled nothing: {why}"
    return report.LEVEL_TITLES[level] if status == "pass" else ""


def diffusers_rows(directory: Path) -> dict:
    """The recorded diffusers checks as rows: one per class, then one per tiny pipeline. Only what
    was recorded (rendering the Markdown table imports diffusers to list every class; this page
    stays a reading of the results files)."""
    from hf_neuron.compat.diffusers import table

    def records(key: str) -> dict:
        return table.load_records(directory / table.RESULT_FILES[key])

    tp, tp_cpu, compiled, pipelines = (records(k) for k in ("tp", "tp_cpu", "compile", "pipelines"))
    rows = [_class_row(name, tp.get(name), tp_cpu.get(name), compiled.get(name))
            for name in sorted(set(tp) | set(tp_cpu) | set(compiled))]
    rows += [_pipeline_row(family, record) for family, record in sorted(pipelines.items())]
    present = [name for key, name in table.RESULT_FILES.items() if (directory / name).exists()]
    return {"files": present, "rows": rows}


def _cell(text: str, record: dict | None = None) -> dict:
    """A diffusers cell: its text, pass/fail/skip (a "blocked" check could not run here), and the
    recorded error as its tooltip when it failed."""
    if not text:
        status = None
    elif text.startswith("pass"):
        status = "pass"
    else:
        status = "skip" if text.startswith("blocked") else "fail"
    return {"text": text, "status": status, "title": _error(record) if status == "fail" else ""}


def _error(record: dict | None) -> str:
    if not record:
        return ""
    error = record.get("error") or next((record[m].get("error") for m in ("memory", "pretrained")
                                         if isinstance(record.get(m), dict) and record[m].get("error")), "")
    return R.trim(error, TOOLTIP_CHARS) if error else ""


def _class_row(name: str, tp: dict | None, tp_cpu: dict | None, compiled: dict | None) -> dict:
    from hf_neuron.compat.diffusers import table

    eager, detail = table.compile_cell(compiled)
    compiled_text = f"pass: {detail}" if compiled and compiled.get("ok") else detail
    share = (tp or {}).get("sharded_fraction")
    return {"name": name, "kind": "class", "cells": [
        _cell(table.tp_cell(tp), tp), _cell(table.tp_cell(tp_cpu), tp_cpu),
        {"text": f"{share:.0%}" if share is not None else "", "status": None, "title": ""},
        _cell(eager, compiled), _cell(compiled_text, compiled), _cell(""),
    ]}


def _pipeline_row(family: str, record: dict) -> dict:
    from hf_neuron.compat.diffusers import table

    eager, compiled, vae = table.pipeline_cells(record)
    return {"name": family, "kind": "pipeline", "transformer": record.get("transformer"), "cells": [
        _cell(""), _cell(""), _cell(""), _cell(eager, record), _cell(compiled, record), _cell(vae, record),
    ]}


# ---------------------------------------------------------------------------------------------- HTML


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _json_for_script(data) -> str:
    """JSON safe inside ``<script>``: a reason quoting ``</script>`` or ``<!--`` must not end it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(releases: list[dict], diffusers: dict) -> str:
    data = {"filters": FILTERS, "releases": releases, "diffusers": diffusers}
    body = "\n".join([
        "<header><h1>hf_neuron compatibility</h1>",
        "<p>Which Hugging Face architectures run on Neuron, per Transformers release, as recorded by "
        "<code>hf-neuron compat</code>. Levels, each compared against CPU:</p>",
        _levels_legend(), "</header>",
        "<main>",
        '<section aria-labelledby="headline-title"><h2 id="headline-title">Headline</h2>',
        _headline_table(releases),
        "</section>",
        '<section aria-labelledby="archs-title"><h2 id="archs-title">Text-generation architectures</h2>',
        _controls(releases),
        *(_release_info(i, release) for i, release in enumerate(releases)),
        _arch_table(releases),
        "</section>",
        '<section aria-labelledby="diffusers-title"><h2 id="diffusers-title">Diffusers classes and pipelines</h2>',
        _diffusers_table(diffusers),
        "</section>",
        "</main>",
        "<footer><p>Written by <code>hf-neuron compat report --html</code>. ✓ pass, ✗ fail, – skip; hover a "
        "mark for its reason, a fix for the gap it closes.</p></footer>",
    ])
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>hf_neuron compatibility</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n"
            f'<script type="application/json" id="compat-data">{_json_for_script(data)}</script>\n'
            f"<script>{SCRIPT}</script>\n</body>\n</html>\n")


def _levels_legend() -> str:
    items = "".join(f"<dt>{lv}</dt><dd>{_e(title)}</dd>" for lv, title in report.LEVEL_TITLES.items())
    return f'<dl class="levels">{items}</dl>'


def _headline_table(releases: list[dict]) -> str:
    head = ("<thead><tr><th scope=\"col\">transformers, device</th><th scope=\"col\">L1-L3 compiled (of the "
            "top-100)</th><th scope=\"col\">runs, uncompiled</th><th scope=\"col\">L1-L4</th>"
            "<th scope=\"col\">L5 TP=2 (of those with a TP plan)</th>"
            "<th scope=\"col\">MoE types with sharded experts</th></tr></thead>")
    rows = []
    for i, release in enumerate(releases):
        h = release["headline"]
        strict = " (single-prompt L3)" if h["single_prompt_l3"] else ""
        rows.append(f'<tr data-headline="{i}"><th scope="row">{_e(h["transformers_version"])}, {_e(h["device"])}'
                    f'{strict} <span class="file">{_e(release["file"])}</span></th>'
                    f'<td class="num">{h["compiled"]}</td><td class="num">{h["uncompiled"]}</td>'
                    f'<td class="num">{h["l1_l4"]}</td><td class="num">{h["l5_pass"]} of {h["l5_tested"]}</td>'
                    f'<td class="num">{_e(report.moe_cell(h))}</td></tr>')
    return f'<table id="headline">{head}<tbody>{"".join(rows)}</tbody></table>'


def _controls(releases: list[dict]) -> str:
    options = "".join(f'<option value="{i}">{_e(r["title"])} ({_e(r["file"])})</option>'
                      for i, r in enumerate(releases))
    filters = "".join(f'<option value="{value}">{_e(label)}</option>' for value, label in FILTERS.items())
    return ('<div class="controls">'
            f'<label>Release <select id="release">{options}</select></label>'
            '<label>Search <input type="search" id="search" placeholder="model_type, reason or fix" '
            'autocomplete="off"></label>'
            f'<label>Show <select id="filter">{filters}</select></label>'
            '<p id="shown-count" role="status" aria-live="polite"></p></div>')


def _release_info(index: int, release: dict) -> str:
    """The release's provenance; the page shows the one of the selected release."""
    archs = release["architectures"]
    unranked = sum(a["rank"] is None for a in archs)
    check = f"L3 in this file: {release['l3_check']}." if release["l3_check"] else (
        "L3 in this file is the earlier single-prompt check.")
    outside = (f" {unranked} architectures outside the top-100 (a <code>--all</code> sweep) are marked "
               "&ldquo;outside top-100&rdquo;; the headline counts the top-100 only." if unranked else "")
    every = release["headline"]["all_types"]
    if every:
        outside += (f" Every causal-LM <code>model_type</code> of this release: {every['compiled']} of "
                    f"{every['types']} ({every['percent']}%) pass L1-L3 compiled, {every['uncompiled']} more run "
                    f"uncompiled, {every['l1_l4']} pass L1-L4, L5 {every['l5_pass']} of {every['l5_tested']}; "
                    f"MoE types with sharded experts: {every['moe_sharded']} of {every['moe_types']}.")
    hidden = "" if index == 0 else " hidden"
    return (f'<p class="release-info" data-release-info="{index}"{hidden}>{_e(release["file"])}: torch '
            f'{_e(release["torch_version"])}, hf_neuron {_e(release["hf_neuron_version"])}, generated '
            f'{_e(release["generated_at"])}. {_e(check)}{outside} Fixes are those of the hf_neuron that wrote '
            'this page.</p>')


def _arch_table(releases: list[dict]) -> str:
    columns = ["rank", "model_type", "tier", "kind", *R.LEVELS, "graphs L3", "graphs L4", "generation",
               "first failure (level: reason, at op)", "fixes for this architecture"]
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in columns)
    bodies = []
    for i, release in enumerate(releases):
        hidden = "" if i == 0 else " hidden"
        rows = "\n".join(_arch_row(a) for a in release["architectures"])
        bodies.append(f'<tbody data-release="{i}"{hidden}>\n{rows}\n</tbody>')
    return f'<table id="architectures"><thead><tr>{head}</tr></thead>{"".join(bodies)}</table>'


def _arch_row(arch: dict) -> str:
    ranked = arch["rank"] is not None
    rank = f'<td class="num">{arch["rank"]}</td>' if ranked else '<td class="outside">outside top-100</td>'
    marks = "".join(_mark(arch, lv) for lv in R.LEVELS)
    graphs = "".join(f'<td class="num">{_e(arch["graphs"][lv])}</td>' for lv in ("L3", "L4"))
    row_class = "" if ranked else ' class="unranked"'
    return (f'<tr data-model-type="{_e(arch["model_type"])}"{row_class}>{rank}'
            f'<th scope="row"><code>{_e(arch["model_type"])}</code></th><td>{_e(arch["tier"])}</td>'
            f'<td>{_e(arch["kind"])}</td>{marks}{graphs}<td>{_e(arch["path"])}</td>'
            f'{_reason_cell(arch)}{_fixes_cell(arch)}</tr>')


def _mark(arch: dict, level: str) -> str:
    status = arch["levels"][level]
    if status is None:
        return '<td class="mark"></td>'
    text = MARKS[status] + (" eager" if level == "L3" and arch["uncompiled"] else "")
    # The mark is for the eye; a screen reader gets the word.
    return (f'<td class="mark {status}" title="{_e(arch["notes"].get(level, ""))}">'
            f'<span aria-hidden="true">{text}</span><span class="sr-only">{level} {status}</span></td>')


def _reason_cell(arch: dict) -> str:
    if arch["failure_level"] is None:
        return f'<td class="reason">{_e(arch["reason"])}</td>'
    op = f' <span class="op">at <code>{_e(arch["op"])}</code></span>' if arch["op"] else ""
    return f'<td class="reason"><strong>{arch["failure_level"]}</strong>: {_e(arch["reason"])}{op}</td>'


def _fixes_cell(arch: dict) -> str:
    fixes = "".join(f'<li title="{_e(f["gap"])}">{_e(f["name"])}</li>' for f in arch["fixes"])
    return f'<td><ul class="fixes">{fixes}</ul></td>' if fixes else "<td></td>"


def _diffusers_table(diffusers: dict) -> str:
    if not diffusers["rows"]:
        return "<p>No diffusers results recorded (<code>hf-neuron compat diffusers</code> records them).</p>"
    intro = (f"<p>Recorded by <code>hf-neuron compat diffusers</code> ({_e(', '.join(diffusers['files']))}): "
             "tensor parallelism TP=2 against TP=1, regional compilation over a 4-step loop, and tiny pipelines "
             "against CPU. &ldquo;blocked&rdquo;: the check cannot run on the simulated device.</p>")
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in ("name", "kind", *DIFFUSERS_COLUMNS))
    rows = []
    for row in diffusers["rows"]:
        cells = "".join(f'<td class="{cell["status"] or ""}" title="{_e(cell["title"])}">{_e(cell["text"])}</td>'
                        for cell in row["cells"])
        transformer = f'<br><span class="file">{_e(row["transformer"])}</span>' if row.get("transformer") else ""
        rows.append(f'<tr data-diffusers="{_e(row["name"])}"><th scope="row">{_e(row["name"])}{transformer}</th>'
                    f'<td>{_e(row["kind"])}</td>{cells}</tr>')
    return (f'{intro}<table id="diffusers"><thead><tr>{head}</tr></thead><tbody>'
            + "\n".join(rows) + "</tbody></table>")


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5rem 2rem;color:#1b1b1b}
h1{font-size:1.5rem;margin:1rem 0 .3rem}h2{font-size:1.2rem;margin:1.5rem 0 .5rem}
[hidden]{display:none!important}
.levels{display:grid;grid-template-columns:auto 1fr;gap:0 .8rem;margin:.3rem 0}.levels dt{font-weight:600}
.levels dd{margin:0}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;padding:.2rem .4rem;text-align:left;
vertical-align:top}thead th{background:#f0f3f6;position:sticky;top:0}
.num{text-align:right;font-variant-numeric:tabular-nums}.file{color:#57606a;font-weight:normal;font-size:.85em}
#headline{width:auto}tr.current th,tr.current td{background:#ddf4ff}
.controls{display:flex;flex-wrap:wrap;gap:.6rem 1.2rem;align-items:center;margin:.5rem 0}
.controls input,.controls select{font:inherit;margin-left:.3rem}#search{width:18rem}
#shown-count{margin:0;font-weight:600}.release-info{color:#57606a;margin:.3rem 0 .6rem}
.mark{text-align:center;white-space:nowrap}.pass{background:#dafbe1}.fail{background:#ffebe9}.skip{color:#57606a}
.outside{color:#9a6700;font-style:italic}.reason{min-width:18rem;max-width:28rem;overflow-wrap:anywhere}.op{color:#57606a}
.fixes{margin:0;padding-left:1rem}.fixes li{cursor:help;overflow-wrap:anywhere;min-width:11rem}.mark[title],td[title]:not([title=""]){cursor:help}
.sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
footer{margin-top:1.5rem;color:#57606a}
"""

# One function decides which rows show; it runs at load and on every change of a control.
SCRIPT = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("compat-data").textContent);
  var release = document.getElementById("release");
  var search = document.getElementById("search");
  var filter = document.getElementById("filter");
  var count = document.getElementById("shown-count");

  // The search box matches the architecture's name, why it fails (or does not run), and its fixes.
  function haystack(arch) {
    return [arch.model_type, arch.reason || ""].concat(arch.fixes.map(function (f) { return f.name; }))
      .join("\\n").toLowerCase();
  }

  function toggle(selector, attribute, chosen) {
    document.querySelectorAll(selector).forEach(function (el) {
      el.hidden = el.getAttribute(attribute) !== chosen;
    });
  }

  function update() {
    var chosen = release.value;
    var needle = search.value.trim().toLowerCase();
    toggle("#architectures tbody", "data-release", chosen);
    toggle(".release-info", "data-release-info", chosen);
    document.querySelectorAll("#headline tbody tr").forEach(function (row) {
      row.classList.toggle("current", row.getAttribute("data-headline") === chosen);
    });
    var archs = data.releases[Number(chosen)].architectures;
    var rows = document.querySelectorAll('#architectures tbody[data-release="' + chosen + '"] tr');
    var shown = 0;
    archs.forEach(function (arch, i) {
      var show = (filter.value === "all" || arch[filter.value] === true) && haystack(arch).indexOf(needle) >= 0;
      rows[i].hidden = !show;
      if (show) { shown += 1; }
    });
    count.textContent = shown + " of " + archs.length + " architectures";
  }

  release.addEventListener("change", update);
  filter.addEventListener("change", update);
  search.addEventListener("input", update);
  update();
})();
"""
