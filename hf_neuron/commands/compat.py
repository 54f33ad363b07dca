"""hf-neuron compat: which of the top-100 text-generation architectures run on Neuron.

Runs levels L1-L5 per architecture, each in a worker subprocess with a timeout, writes
compatibility/results/<transformers version>-<device kind>.json after every architecture, and
regenerates the table in compatibility/README.md and the coverage chart.
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
    p.add_argument("--output", type=Path, metavar="PATH",
                   help="results file (default compatibility/results/<transformers>-<device kind>.json)")
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
                   help="README to regenerate (default: compatibility/README.md when writing the default results)")
    p.add_argument("--no-readme", action="store_true", help="do not regenerate the README and chart")
    p.add_argument("--report-only", action="store_true",
                   help="only regenerate the README and chart from the existing results files")
    p.add_argument("--check", action="store_true", help="exit with status 1 when any architecture fails a level")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--keep-workdir", action="store_true", help="keep worker logs and tiny checkpoints (debugging)")
    p.set_defaults(func=handler)


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
    print(f"top-100: {s['headline']} of 100 pass L1-L3 ({s['ranked_tested']} ranked entries recorded)")
    for lv in R.LEVELS:
        c = s["per_level"][lv]
        print(f"  {lv}: pass {c['pass']:3d}  fail {c['fail']:3d}  skip {c['skip']:3d}")
    if s["all_tested"] != s["ranked_tested"]:
        print(f"all recorded: {s['all_headline']} of {s['all_tested']} pass L1-L3")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def handler(args) -> int:
    from hf_neuron.compat import archs, report
    from hf_neuron.compat import results as R
    from hf_neuron.compat.runner import FatalRunError, RunConfig, Runner, default_output

    default_readme = archs.compatibility_dir() / "README.md"
    if args.report_only:
        files = [args.output] if args.output else report.results_files()
        readme = args.readme or default_readme
        report.update_readme(readme, files, chart_dir=readme.parent)
        print(f"regenerated {readme} from {len(files)} results file(s)")
        return 0
    try:
        levels = _levels(args.levels)
        if args.jobs < 1:
            raise ValueError("-j must be at least 1")
        if args.timeout <= 0:
            raise ValueError("--timeout must be positive")
        names = args.arch.split(",") if args.arch else None
        specs = archs.select(all_archs=args.all, arch_names=names, quick=args.quick)
        config = RunConfig(specs=specs, device=args.device, levels=levels, output=args.output, jobs=args.jobs,
                           timeout=args.timeout, resume=args.resume, rerun_failed=args.rerun_failed,
                           progress=not args.no_progress and sys.stderr.isatty(),
                           keep_workdir=args.keep_workdir)
        runner = Runner(config)
    except (ValueError, FileNotFoundError, FatalRunError) as exc:
        print(f"hf-neuron compat: error: {exc}", file=sys.stderr)
        return 2

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        print(f"hf-neuron compat: {len(specs)} architecture(s) on {runner.device_kind} "
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

    _print_summary(results, runner.output)
    readme = args.readme
    if readme is None and not args.no_readme and runner.output.resolve() == default_output(args.device).resolve():
        readme = default_readme
    if readme is not None and not args.no_readme:
        files = report.results_files(runner.output.parent) if readme == default_readme else [runner.output]
        report.update_readme(readme, files, chart_dir=Path(readme).parent)
        print(f"regenerated {readme}")
    names = {s.model_type for s in specs}
    if args.check and any(R.has_failure(r) for r in results["architectures"] if r["model_type"] in names):
        return 1
    return 0
