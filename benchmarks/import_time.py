"""Import cost of hf_neuron where there is no neuron device: it must be nothing.

    python benchmarks/import_time.py [--runs 5]

Times ``import transformers, trl, diffusers`` (and ``import torch`` alone) in fresh processes without
a neuron device, with hf_neuron installed as usual and with ``HF_NEURON_DISABLE=1``, alternating the
two so that disk caches favour neither, and prints the median of each and their ratio from this one
run. hf_neuron's entry point runs at ``import torch`` in both; without a device it installs no import
hook, so the ratio stays at 1.0 within the noise of the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = (
    "import time; start = time.perf_counter(); import {modules}; "
    "print(time.perf_counter() - start)"
)


def time_import(modules: str, disable: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_NEURON_", "NEURON_"))}
    env.update(HF_NEURON_SIMULATOR="0", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    if disable:
        env["HF_NEURON_DISABLE"] = "1"
    out = subprocess.run([sys.executable, "-c", CODE.format(modules=modules)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="processes per variant (default: %(default)s)")
    args = parser.parse_args(argv)
    print(f"{'imports':<34} {'hf_neuron (s)':>14} {'DISABLE=1 (s)':>14} {'ratio':>7}")
    for modules in ("torch", "torch, transformers, trl, diffusers"):
        installed, disabled = [], []
        for _ in range(args.runs):
            installed.append(time_import(modules, disable=False))
            disabled.append(time_import(modules, disable=True))
        a, b = statistics.median(installed), statistics.median(disabled)
        print(f"{modules:<34} {a:>14.3f} {b:>14.3f} {a / b:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
