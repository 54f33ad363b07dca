"""hf-neuron compat: which of the top-100 text-generation architectures run on Neuron.

Runs levels L1-L5 per architecture, each in a worker subprocess with a timeout, and writes the
results file <transformers version>-<device kind>.json after every architecture. In a source
checkout that file is the committed one (hf_neuron/compat/data/results/) and the run regenerates
the table in compatibility/README.md and the coverage chart; in an installed hf_neuron it goes into
the current folder (or --output) and no README is touched.

`hf-neuron compat diffusers` runs the diffusers checks instead (tensor parallelism, regional
compilation, tiny pipelines) and writes their table (compatibility/diffusers.md in a checkout):
see `hf-neuron compat diffusers --help`. `hf-neuron compat report --html DIR` writes the recorded
results as one searchable web page (see `hf-neuron compat report --help`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compat",
        help="run the compatibility sweep over the top-100 text-generation architectures",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true",
                       help="every causal-LM model_type of the installed transformers, plus the ranked list")
    which.add_argument("--arch", metavar="A,B", help="only these model_types (comma-separated)")
    which.add_argument("--quick", action="store_true", help="a quick subset (~5 architectures), for CI")
    p.add_argument("--images", action="store_true",
                   help="the image-text-to-text architectures instead (ranked list, or --arch/--quick), generating "
                        "from prompts with an image; results in images/, table in compatibility/images.md")
    p.add_argument("--output", type=Path, metavar="PATH",
                   help="results file (default <transformers>-<device kind>.json: in a source checkout the "
                        "committed one in hf_neuron/compat/data/results/, else in the current folder)")
    p.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                   help="parallel worker processes (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="skip architectures already recorded in the results file")
    p.add_argument("--rerun-failed", action="store_true", help="rerun only architectures recorded as failing")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds per architecture before its worker is killed (default: %(default)s)")
    p.add_argument("--levels", default="L1,L2,L3,L4,L5", metavar="L1,..",
                   help="levels to run (default: all five)")
    p.add_argument("--device", default="neuron",
                   help="'neuron' (default; the simulator when no Trainium is present) or 'cpu' to test the harness")
    p.add_argument("--readme", type=Path, metavar="PATH",
                   help="README to regenerate (default: compatibility/README.md when a source checkout writes "
                        "the default results)")
    p.add_argument("--no-readme", action="store_true", help="do not regenerate the README and chart")
    p.add_argument("--report-only", action="store_true",
                   help="only regenerate the README and chart from the existing results files")
    p.add_argument("--check", action="store_true", help="exit with status 1 when any architecture fails a level")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--keep-workdir", action="store_true", help="keep worker logs and tiny checkpoints (debugging)")
    p.set_defaults(func=handler)

    suites = p.add_subparsers(dest="suite", title="suite",
                              description="without one: the text-generation sweep above")
    d = suites.add_parser(
        "diffusers",
        help="the diffusers checks (TP plans, regional compilation, pipelines) and their table",
        description=DIFFUSERS_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("--quick", dest="diffusers_quick", action="store_true",
                   help="a few classes and pipelines and a one-class benchmark (a few minutes), for CI; needs --output")
    d.add_argument("--output", dest="diffusers_output", type=Path, metavar="PATH",
                   help="table to write (default compatibility/diffusers.md in a source checkout, else "
                        "./diffusers.md; --quick must name another file unless you mean to overwrite it)")
    d.add_argument("--results-dir", dest="diffusers_results", type=Path, metavar="DIR",
                   help="where each check writes its results (default hf_neuron/compat/data/results/diffusers "
                        "for the checkout's table, else <output stem>-results next to the table)")
    d.add_argument("--report-only", dest="diffusers_report_only", action="store_true",
                   help="run nothing: only re-render the table from the results directory")
    d.add_argument("--timeout", dest="diffusers_timeout", type=float, default=3600.0, metavar="S",
                   help="seconds per step before it is killed (default: %(default)s)")
    d.add_argument("--check", dest="diffusers_check", action="store_true",
                   help="exit with status 1 when any recorded class or pipeline check fails")
    d.add_argument("--keep-logs", dest="diffusers_keep_logs", action="store_true",
                   help="keep each step's log (kept anyway when a step fails)")
    d.set_defaults(func=_suite_handler(p, "diffusers", diffusers_handler))

    r = suites.add_parser(
        "report",
        help="the recorded results as one static web page (search, filters), no server needed",
        description=REPORT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--html", dest="report_html", type=Path, metavar="DIR",
                   help="folder to write index.html into (created when missing)")
    r.add_argument("--results", dest="report_results", type=Path, action="append", metavar="FILE",
                   help="a results file to show instead of the committed ones, e.g. the one of a --all sweep "
                        "(repeatable: one release each)")
    r.set_defaults(func=_suite_handler(p, "report", report_handler))


DIFFUSERS_DESCRIPTION = """\
hf-neuron compat diffusers: the diffusers table (compatibility/diffusers.md in a source checkout,
else ./diffusers.md) from fresh runs.

Runs, each in its own process, with one progress line per step and per class:
  1. TP=2 == TP=1 on the neuron device (torchrun --standalone --nproc_per_node=2,
     hf_neuron.compat.diffusers.tp_check)
  2. the same on CPU with gloo
  3. regional compilation over a 4-step loop (hf_neuron.compat.diffusers.compile_check)
  4. tiny pipelines against CPU, eager and compiled (hf_neuron.compat.diffusers.pipeline_check)
  5. regional vs whole-model compile (hf_neuron.compat.diffusers.compile_benchmark)
then writes the table. The neuron steps run on the simulator when no Trainium device is present.
A failing class is recorded in the table; a step that records nothing (crash, timeout) leaves the
table unchanged and exits 1.

examples:
  hf-neuron compat diffusers
  hf-neuron compat diffusers --quick --output /tmp/diffusers.md
  hf-neuron compat diffusers --report-only
"""

REPORT_DESCRIPTION = """\
hf-neuron compat report --html DIR: the recorded results as one web page, DIR/index.html.

One self-contained file (its style, script and data inline, nothing fetched): open it from disk or
publish it as is. It has the headline per Transformers release, a release selector, one row per
architecture (levels L1-L5 with their reasons on hover, graphs, the generation path, the first
failure, hf_neuron's fixes for it), a search box and filters (passed, runs uncompiled, failed,
tensor parallel), and the diffusers classes and pipelines. By default it shows the committed results
(one file per Transformers release); --results shows other results files instead, e.g. the one a
`hf-neuron compat --all --output sweep.json` run wrote.

examples:
  hf-neuron compat report --html site
  hf-neuron compat report --html /tmp/sweep --results sweep.json
"""

# Options of the text-generation sweep, which mean nothing to the other suites.
_TEXT_GENERATION_OPTIONS = ("all", "arch", "quick", "images", "output", "jobs", "resume", "rerun_failed", "timeout", "levels",
                            "device", "readme", "no_readme", "report_only", "check", "no_progress", "keep_workdir")


def _suite_handler(compat_parser, suite: str, run):
    """The handler of ``hf-neuron compat <suite>``: argparse accepts the sweep's options before the
    suite name (``hf-neuron compat --quick diffusers``) and the suite would silently ignore them, so
    they are refused with the place they belong, then ``run(args)``."""
    def handler(args) -> int:
        given = [name for name in _TEXT_GENERATION_OPTIONS if getattr(args, name) != compat_parser.get_default(name)]
        if given:
            options = ", ".join("--" + name.replace("_", "-") for name in given)
            print(f"hf-neuron compat {suite}: error: {options} given before '{suite}' belong(s) to the "
                  f"text-generation sweep; put the {suite} options after '{suite}' "
                  f"(see hf-neuron compat {suite} --help)", file=sys.stderr)
            return 2
        return run(args)

    return handler


def report_handler(args) -> int:
    """Validate what was given (one line on stderr and status 2 for each way it can be wrong, with
    what to pass instead), then write the page."""
    from hf_neuron.compat import html_report

    def error(message: str) -> int:
        print(f"hf-neuron compat report: error: {message}", file=sys.stderr)
        return 2

    directory = args.report_html
    if directory is None:
        return error("give --html DIR, the folder to write index.html into")
    if directory.exists() and not directory.is_dir():
        return error(f"--html {directory} is a file; give a folder (it gets index.html), new or existing")
    for path in args.report_results or []:
        if not path.is_file():
            problem = "a folder, not a file" if path.is_dir() else "no such file"
            return error(f"--results {path}: {problem}; give a results file a `hf-neuron compat` run wrote "
                         "(<transformers>-<device kind>.json), or leave --results out for the committed ones")
    try:
        index = html_report.write_site(directory, files=args.report_results)
    except (OSError, ValueError) as exc:
        hint = (" (give --results a results file a `hf-neuron compat` run wrote, or leave it out for the committed "
                "ones)" if args.report_results and not isinstance(exc, OSError) else "")
        return error(f"{exc}{hint}")
    print(index)
    return 0


def diffusers_handler(args) -> int:
    from hf_neuron.compat.diffusers import run as diffusers_run

    default_output = diffusers_run.default_output()
    output = args.diffusers_output or default_output
    if args.diffusers_quick and args.diffusers_output is None:
        print(f"hf-neuron compat diffusers: error: --quick writes a partial table: give --output PATH "
              f"({default_output.name} is written by the full run)", file=sys.stderr)
        return 2
    if args.diffusers_timeout <= 0:
        print("hf-neuron compat diffusers: error: --timeout must be positive", file=sys.stderr)
        return 2
    results_dir = args.diffusers_results or diffusers_run.default_results_dir(output)
    if args.diffusers_report_only:
        if not results_dir.is_dir():
            print(f"hf-neuron compat diffusers: error: no results directory {results_dir}", file=sys.stderr)
            return 2
        error = diffusers_run.render_table(results_dir, output, quick=args.diffusers_quick)
        if error:
            print(f"hf-neuron compat diffusers: error: {error}", file=sys.stderr)
            return 1
        print(f"regenerated {output} from {results_dir}")
        return 0

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    say(f"hf-neuron compat diffusers: {'quick subset' if args.diffusers_quick else 'every check'} -> {output} "
        f"(results in {results_dir})")
    status = diffusers_run.run(output, results_dir, quick=args.diffusers_quick, timeout=args.diffusers_timeout,
                               keep_logs=args.diffusers_keep_logs, say=say)
    if status != 0:
        return status
    failures = diffusers_run.recorded_failures(results_dir)
    print(f"wrote {output}; {len(failures)} recorded failure(s)" + (f": {', '.join(failures)}" if failures else ""))
    return 1 if args.diffusers_check and failures else 0


def _levels(text: str) -> tuple[str, ...]:
    from hf_neuron.compat.results import LEVELS

    levels = tuple(dict.fromkeys(x.strip().upper() for x in text.split(",") if x.strip()))
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad or not levels:
        raise ValueError(f"--levels takes a comma-separated subset of {','.join(LEVELS)}, got {text!r}")
    return tuple(lv for lv in LEVELS if lv in levels)


def _print_summary(results: dict, output: Path) -> None:
    from hf_neuron.compat import results as R

    s = R.summarize(results)
    print(f"results: {output}")
    print(f"top-100: {s['headline']} of 100 pass L1-L3 compiled, {s['runs_uncompiled']} more uncompiled "
          f"({s['ranked_tested']} ranked entries recorded)")
    for lv in R.LEVELS:
        c = s["per_level"][lv]
        print(f"  {lv}: pass {c['pass']:3d}  fail {c['fail']:3d}  skip {c['skip']:3d}")
    every = R.summarize_all_types(results)
    if every:
        print(f"every causal-LM type: {every['compiled']} of {every['types']} ({every['percent']}%) pass L1-L3 "
              f"compiled, {every['uncompiled']} more uncompiled, {every['l1_l4']} pass L1-L4, L5 "
              f"{every['l5_pass']} of {every['l5_tested']} ({every['tested']} types recorded)")
    elif s["all_tested"] != s["ranked_tested"]:
        print(f"all recorded: {s['all_headline']} of {s['all_tested']} pass L1-L3 compiled")


def _regenerate(readme: Path, files: list[Path], *, headline: bool) -> None:
    """The compatibility README (and its charts) from ``files``; with ``headline``, also the project
    README's compatibility block (only the committed results files of a checkout may write it)."""
    from hf_neuron.compat import paths, report

    report.update_readme(readme, files, chart_dir=readme.parent)
    print(f"regenerated {readme} from {len(files)} results file(s)")
    project = paths.source_checkout() / "README.md" if headline else None
    if project is not None and report.update_headline(project, files):
        print(f"regenerated the compatibility headline in {project}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def handler(args) -> int:
    from hf_neuron.compat import archs, paths, report
    from hf_neuron.compat import results as R
    from hf_neuron.compat.runner import default_output

    compatibility = paths.compatibility_dir()
    if args.images:
        return _images_handler(args, compatibility)
    default_readme = compatibility / "README.md" if compatibility else None  # only a checkout has one
    if args.report_only:
        readme = args.readme or default_readme
        if readme is None:
            print("hf-neuron compat: error: not a source checkout, so there is no compatibility/README.md: "
                  "give --readme PATH", file=sys.stderr)
            return 2
        files = [args.output] if args.output else report.results_files()
        _regenerate(readme, files, headline=readme == default_readme and not args.output)
        return 0
    ran = _run_sweep(args, lambda names: archs.select(all_archs=args.all, arch_names=names, quick=args.quick),
                     "hf-neuron compat", all_types=args.all)
    if isinstance(ran, int):
        return ran
    specs, runner, results = ran

    _print_summary(results, runner.output)
    readme = args.readme
    if readme is None and not args.no_readme and runner.output.resolve() == default_output(args.device).resolve():
        readme = default_readme
        if readme is None:
            print("no README regenerated: not a source checkout of hf_neuron (--readme PATH writes the table "
                  "into one)")
    if readme is not None and not args.no_readme:
        files = report.results_files(runner.output.parent) if readme == default_readme else [runner.output]
        _regenerate(Path(readme), files, headline=readme == default_readme)
    names = {s.model_type for s in specs}
    if args.check and any(R.has_failure(r) for r in results["architectures"] if r["model_type"] in names):
        return 1
    return 0


def _run_sweep(args, select, title: str, **config):
    """Check the sweep's options, select its architectures (``select(arch names or None)``) and run it:
    ``(specs, runner, results)``, or the exit status (2 for bad input or a failed run, 130 when interrupted).
    ``config``: the :class:`~hf_neuron.compat.runner.RunConfig` fields that tell the sweeps apart."""
    from hf_neuron.compat.runner import FatalRunError, RunConfig, Runner

    try:
        levels = _levels(args.levels)
        if args.jobs < 1:
            raise ValueError("-j must be at least 1")
        if args.timeout <= 0:
            raise ValueError("--timeout must be positive")
        specs = select(args.arch.split(",") if args.arch else None)
        run_config = RunConfig(specs=specs, device=args.device, levels=levels, output=args.output, jobs=args.jobs,
                               timeout=args.timeout, resume=args.resume, rerun_failed=args.rerun_failed,
                               progress=not args.no_progress and sys.stderr.isatty(),
                               keep_workdir=args.keep_workdir, **config)
        runner = Runner(run_config)
    except (ValueError, FileNotFoundError, FatalRunError) as exc:
        print(f"hf-neuron compat: error: {exc}", file=sys.stderr)
        return 2

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        print(f"{title}: {len(specs)} architecture(s) on {runner.device_kind} "
              f"({args.device}), levels {','.join(levels)}, -j {args.jobs} -> {runner.output}", file=sys.stderr)
        results = runner.run()
    except KeyboardInterrupt:
        print(f"\nhf-neuron compat: interrupted; finished architectures are in {runner.output} "
              "(continue with --resume)", file=sys.stderr)
        return 130
    except FatalRunError as exc:
        print(f"hf-neuron compat: error: {exc}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    return specs, runner, results


def _images_handler(args, compatibility: Path | None) -> int:
    """``hf-neuron compat --images``: the image-text-to-text run and its table (compatibility/images.md)."""
    from hf_neuron.compat import archs, image_report, report
    from hf_neuron.compat import results as R
    from hf_neuron.compat.runner import default_output

    default_page = compatibility / "images.md" if compatibility else None
    if args.all:
        print("hf-neuron compat: error: --all is the causal-LM sweep; with --images use the ranked list (no "
              "option), --arch or --quick", file=sys.stderr)
        return 2
    if args.report_only:
        page = args.readme or default_page
        if page is None:
            print("hf-neuron compat: error: not a source checkout, so there is no compatibility/images.md: give "
                  "--readme PATH", file=sys.stderr)
            return 2
        files = [args.output] if args.output else report.results_files(default_output(args.device, True).parent)
        image_report.update_page(page, files)
        print(f"regenerated {page} from {len(files)} results file(s)")
        return 0
    ran = _run_sweep(args, lambda names: archs.select_images(names, quick=args.quick), "hf-neuron compat --images",
                     images=True)
    if isinstance(ran, int):
        return ran
    specs, runner, results = ran
    names = {s.model_type for s in specs}
    recorded = [r for r in results["architectures"] if r["model_type"] in names]
    compiled = sum(1 for r in recorded if R.passes_compiled(r))
    print(f"results: {runner.output}")
    print(f"image-text-to-text: {compiled} of {len(recorded)} generate from an image compiled (L1-L3) with the CPU "
          "tokens")
    for lv in R.LEVELS:
        counts = {st: sum(1 for r in recorded if r["levels"].get(lv) == st) for st in R.STATUSES}
        print(f"  {lv}: pass {counts['pass']:3d}  fail {counts['fail']:3d}  skip {counts['skip']:3d}")
    page = args.readme
    if page is None and not args.no_readme and runner.output.resolve() == default_output(args.device, True).resolve():
        page = default_page
    if page is not None and not args.no_readme:
        files = report.results_files(runner.output.parent) if page == default_page else [runner.output]
        image_report.update_page(Path(page), files)
        print(f"regenerated {page} from {len(files)} results file(s)")
    if args.check and any(R.has_failure(r) for r in recorded):
        return 1
    return 0
