"""Worker process: runs L1-L4 for the architectures the runner sends, one at a time.

``python -m hf_neuron.compat.worker --device neuron --levels L1,L2,L3,L4,L5 --workdir DIR --events-fd N``

Reads one JSON :class:`~hf_neuron.compat.archs.ArchSpec` per line on stdin and writes JSON events to
file descriptor N: ``start``, ``level_start``, ``level_result`` (with the partial record, so a crash in a
later level loses nothing), ``result``, or ``fatal`` (the device itself is unusable: the run stops).
One process serves many architectures to amortise the interpreter and import start-up; the runner
starts a fresh one after a crash or a timeout. stdout and stderr go to a log the runner reads to
explain crashes; ``faulthandler`` writes the Python stack there on a fatal signal, and on SIGUSR1
(the runner sends it before killing a hung worker, to record where it hung).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from hf_neuron.compat.archs import KIND_IMAGE_TEXT, KIND_TEST, ArchSpec


class EventWriter:
    def __init__(self, fd: int):
        self.fd = fd

    def __call__(self, event: dict) -> None:
        data = (json.dumps(event, default=str) + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


def watch_parent() -> None:
    """Exit when the runner goes away (a killed runner must not leave workers behind)."""
    parent = os.getppid()

    def loop():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, daemon=True, name="compat-parent-watch").start()


def check_device(device: str) -> str | None:
    """None when ``device`` is usable, else what is wrong and how to fix it."""
    import torch

    kind = device.split(":")[0]
    if kind == "cpu":
        return None
    try:
        torch.ones(1, device=device)
    except Exception as exc:  # noqa: BLE001
        return (f"device {device!r} is not usable in the worker ({type(exc).__name__}: {exc}). On Trainium "
                "install torch-neuronx; elsewhere run with HF_NEURON_SIMULATOR=1")
    return None


def environment(device: str) -> dict:
    import torch
    import transformers

    kind = device.split(":")[0]
    if kind == "cpu":
        device_kind = "cpu"
    else:
        try:
            from hf_neuron.simulator import is_simulated

            device_kind = "simulated" if is_simulated() else "trainium"
        except ImportError:
            device_kind = "trainium"
    backend = "gloo" if kind == "cpu" else "neuron"
    dist_ok = False
    if torch.distributed.is_available():
        try:
            dist_ok = backend in torch.distributed.Backend.backend_list
        except Exception:  # noqa: BLE001
            dist_ok = False
    return {
        "device_kind": device_kind,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "dist_backend": backend,
        "dist_backend_available": dist_ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_neuron.compat.worker")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--levels", default="L1,L2,L3,L4,L5")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)

    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    watch_parent()
    emit = EventWriter(args.events_fd)
    levels = args.levels.split(",")
    workdir = Path(args.workdir)
    env_sent = False
    emit({"event": "ready", "pid": os.getpid()})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        spec = ArchSpec.from_json(json.loads(line))
        if spec.kind == KIND_TEST:
            from hf_neuron.compat.testing_archs import FakeArchRun as Run
        else:
            if spec.kind == KIND_IMAGE_TEXT:
                from hf_neuron.compat.image_levels import ImageArchRun as Run
            else:
                from hf_neuron.compat.levels import ArchRun as Run

            if not env_sent:
                threads = os.environ.get("HF_NEURON_COMPAT_THREADS")
                import torch

                if threads:
                    torch.set_num_threads(int(threads))
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                problem = check_device(args.device)
                if problem:
                    emit({"event": "fatal", "reason": problem})
                    return 2
                emit({"event": "env", **environment(args.device)})
                env_sent = True
        emit({"event": "start", "model_type": spec.model_type})
        run = Run(spec, args.device, workdir, lambda ev, name=spec.model_type: emit({**ev, "model_type": name}))
        record = run.run(levels)
        emit({"event": "result", "model_type": spec.model_type, "record": record})
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
