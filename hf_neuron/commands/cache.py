"""``hf-neuron cache export FILE`` / ``import FILE`` / ``info``: move compiled graphs between machines.

Export packs TorchNeuron's compiled-graph cache (``TORCH_NEURONX_NEFF_CACHE_DIR``), Dynamo's cache
artifacts a warm-up saved, and a manifest of the versions and device kind that compiled them. Import
unpacks them on another machine with the same environment; where anything differs it names each
difference and imports nothing, and an archive whose files do not match the sha256 digests of its
manifest is refused the same way.

Import only caches you made or trust: a cache is compiled code, and Dynamo's cache artifacts are
pickled data that is unpickled at import (as loading any pickle, it can run code).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("cache", help="export / import the compiled-graph cache",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    export = sub.add_parser("export", help="pack the compiled-graph cache into FILE (.tar.gz)")
    export.add_argument("file", metavar="FILE")
    export.set_defaults(func=run_export)
    imported = sub.add_parser("import", help="unpack FILE into this machine's compiled-graph cache (only a "
                                             "cache you made or trust: it loads pickled compiled code)",
                              description="Unpack FILE (from `hf-neuron cache export`) into this machine's "
                                          "compiled-graph cache, after checking its environment and every file's "
                                          "sha256. Import only caches you made or trust: Dynamo's cache artifacts "
                                          "are pickled and loaded at import, and can run code.")
    imported.add_argument("file", metavar="FILE")
    imported.set_defaults(func=run_import)
    info = sub.add_parser("info", help="where the cache is, how many files it holds, this environment")
    info.set_defaults(func=run_info)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_export(args: argparse.Namespace) -> int:
    from hf_neuron.compile_cache import CacheError, cache_dir, export_cache

    try:
        manifest = export_cache(args.file)
    except CacheError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"exported {manifest['files']} files from {cache_dir()} to {args.file} "
          f"(torch {manifest['torch']}, torch-neuronx {manifest['torch_neuronx']}, transformers "
          f"{manifest['transformers']}, device {manifest['device']})")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from hf_neuron.compile_cache import CacheError, cache_dir, import_cache

    try:
        manifest = import_cache(args.file)
    except CacheError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"imported {manifest['imported']} files into {cache_dir()}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from hf_neuron.compile_cache import cache_dir, cache_files, environment

    directory = cache_dir()
    print(json.dumps({"cache_dir": None if directory is None else str(directory),
                      "files": len(cache_files(directory)) if directory else 0, "environment": environment()},
                     indent=1))
    return 0
