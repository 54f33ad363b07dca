"""Install hf_neuron from its wheel, as a user does, and run its commands from an empty folder.

A checkout hides what a wheel lacks: a file read at run time that is not package data, a path that
assumes the source tree, the checkout itself on ``sys.path``. This script builds the wheel of the
checkout (its tracked and new files, none of a stale ``build/``) into ``out/wheel``, installs it with
``torch==2.13.0`` into the virtual environment ``~/.cache/hf_neuron/environments/wheel``
(``$HF_NEURON_CACHE``; pip resolves the newest releases the declared ranges allow; no test extra), and
runs, from an empty folder outside the checkout with the simulator on and the user site off:

  1. ``hf-neuron demo``;
  2. user code under ``torchrun --nproc_per_node=2``: ``init_process_group("neuron")``, ``all_reduce``;
  3. ``hf-neuron tiny-model llama ./tiny``, then user code under torchrun that shards it over the two
     processes and generates greedily: tokens equal to the same generation on CPU;
  4. ``hf-neuron check ./tiny`` (the verdict read from the results shipped in the wheel, exit status 0)
     and ``hf-neuron compat report --html site`` (the page, from the same results);
  5. ``hf-neuron compat --quick`` with its default output: a results file in the current folder;
  6. ``hf-neuron compat --images --quick``: a vision-language model generating from images, its results
     in ``images/`` of the current folder.

    python scripts/wheel_check.py            # build, install, run
    python scripts/wheel_check.py --keep     # keep the folder the steps ran in (its path is printed)
    python scripts/wheel_check.py --fresh    # recreate the environment even when its requirements are unchanged

One line per step with its wall time and PASS or FAIL; exit status 1 when a step fails, after the
tail of its output. The environment lives outside the checkout, so that a fresh clone (CI clones one
for every run) reuses it while the wheel's requirements are unchanged: a changed wheel is reinstalled,
and the libraries are upgraded to the newest releases the wheel admits on every run, as a fresh
install would resolve them. The simulator compiles its C++ extensions on first use, cached under
``~/.cache/hf_neuron`` per torch installation: a new environment pays that once, as a user does.
Measured on a 2-core machine: 9 to 19 minutes the first time (a new environment, both C++ builds; the
longer with a test run beside it), about 5 minutes after.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path
from typing import Callable

# Loaded by the tests from its path as well as run as a script: only main() imports another script.
ROOT = Path(__file__).resolve().parent.parent

TORCH = "torch==2.13.0"  # the CPU build on this machine's disk; any other spec downloads a CUDA build
TAIL_LINES = 40

ALLREDUCE = '''\
"""User code: one tensor per process on neuron:LOCAL_RANK, summed over the "neuron" process group."""
import os

import torch
import torch.distributed as dist

dist.init_process_group(backend="neuron")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
tensor = torch.full((4,), float(rank + 1), device=device)
dist.all_reduce(tensor)
expected = float(sum(range(1, world + 1)))
assert tensor.device == device and tensor.cpu().tolist() == [expected] * 4, tensor
print(f"rank {rank}: all_reduce on {device} = {expected}", flush=True)
dist.destroy_process_group()
'''

GENERATE_TP = '''\
"""User code: a model sharded over every process (the documented tensor parallelism), greedy tokens equal to CPU."""
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from transformers import AutoModelForCausalLM, AutoTokenizer, DistributedConfig

path = sys.argv[1]
dist.init_process_group(backend="neuron")  # before any neuron tensor, as on Trainium
world = dist.get_world_size()
model = AutoModelForCausalLM.from_pretrained(
    path, distributed_config=DistributedConfig(tp_size=world), device_mesh=DeviceMesh("neuron", list(range(world)))
)
tokenizer = AutoTokenizer.from_pretrained(path)
conversations = [[{"role": "user", "content": text}] for text in ("What is a NeuronCore?", "Write a haiku.")]
inputs = tokenizer.apply_chat_template(conversations, add_generation_prompt=True, padding=True, return_tensors="pt",
                                       return_dict=True,
                                       tokenizer_kwargs={"padding_side": "left", "pad_to_multiple_of": 16})
settings = dict(max_new_tokens=8, do_sample=False, cache_implementation="static", max_cache_len=64,
                prefill_chunk_size=16)
with torch.no_grad():
    tokens = model.generate(**inputs.to(model.device), **settings).cpu()
print(f"rank {dist.get_rank()}: generated on {model.device}", flush=True)
if dist.get_rank() == 0:
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(path).generate(**inputs.to("cpu"), **settings)
    assert torch.equal(tokens, expected), f"TP={world} tokens {tokens.tolist()} differ from CPU {expected.tolist()}"
    print(f"TP={world} tokens equal CPU: {tokens.tolist()}", flush=True)
dist.destroy_process_group()
'''


class StepFailed(Exception):
    """A step's command failed or its result is wrong; the message says what, the log the rest."""


def source_files() -> list[Path]:
    """The checkout's files as a commit would have them: tracked and new, not ignored."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    return [Path(name) for name in listed.split("\0") if name and (ROOT / name).is_file()]


def build_wheel(dest: Path) -> Path:
    """The wheel of the checkout's files, built from a copy of them (no stale ``build/``), in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="hf-neuron-wheel-src-") as staging:
        for name in source_files():
            (Path(staging) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, Path(staging) / name)
        # A fixed date for the files the build writes: the same sources give the same wheel, byte for byte.
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(dest), staging], check=True, capture_output=True, text=True,
                       env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"})
    (wheel,) = dest.glob("*.whl")
    return wheel


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line for line in lines if line.startswith("Requires-Dist:")]


def _required_names(requirements: list[str]) -> list[str]:
    """The distributions ``Requires-Dist`` lines name, without the ones behind an extra."""
    from packaging.requirements import Requirement

    parsed = [Requirement(line.partition(":")[2].strip()) for line in requirements]
    return [r.name for r in parsed if r.marker is None or "extra" not in str(r.marker)]


def ensure_wheel_venv(path: Path, wheel: Path, fresh: bool, log) -> Path:
    """An environment with ``TORCH`` and the wheel (stamped by the wheel's hash, unlike
    ``_environments.ensure_venv``, which pins releases from ``pyproject.toml``). Reused while the
    wheel's requirements are the same: then hf_neuron is reinstalled only when the wheel changed, and
    every requirement is upgraded to the newest release the wheel admits (what a fresh environment
    resolves today); else the environment is created anew and pip resolves the requirements."""
    python = path / "bin" / "python"
    requires = wheel_requirements(wheel)
    requirements = "\n".join([sys.version.split()[0], TORCH, *requires]) + "\n"
    installed = f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n{requirements}"
    stamp = path / "installed-wheel.txt"
    before = stamp.read_text() if stamp.exists() and python.exists() and not fresh else ""
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if before.partition("\n")[2] == requirements:
        if before != installed:
            run([*pip, "--no-deps", "--force-reinstall", str(wheel)], log, cwd=path)
        log.write(f"{path} has this wheel installed; upgrading its requirements to the newest releases\n")
        # The wheel in the same command: its declared ranges bound the upgrade.
        names = [n for n in _required_names(requires) if n != "torch"]
        run([*pip, "--upgrade", TORCH, str(wheel), *names], log, cwd=path)
    else:
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        run([*pip, TORCH, str(wheel)], log, cwd=path)
    stamp.write_text(installed)
    return python


def run(command: list[str], log, timeout: float | None = None, **kwargs) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"killed after {timeout:.0f} s") from None
    if done.returncode != 0:
        raise StepFailed(f"`{' '.join([Path(command[0]).name, *command[1:]])}` exited with {done.returncode}")


def user_env(venv_dir: Path) -> dict:
    """A user's shell with the environment activated: no PYTHONPATH, no user site, the simulator on."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv_dir),
               PYTHONNOUSERSITE="1", HF_NEURON_SIMULATOR="1",
               HF_HUB_OFFLINE="1")  # everything is local; no Hub look-up to wait for on a machine without it
    return env


def user_steps(folder: Path, venv_dir: Path) -> list[tuple[str, Callable]]:
    """(title, function(log, env, timeout)) for what a user runs in ``folder``."""
    bin_dir = venv_dir / "bin"
    torchrun = [str(bin_dir / "torchrun"), "--standalone", "--nproc_per_node=2"]

    def where(log, env, timeout):
        code = ("import hf_neuron, sys; print(hf_neuron.__file__); "
                "assert hf_neuron.__file__.startswith(sys.prefix), 'hf_neuron is not the wheel installed here'")
        run([str(bin_dir / "python"), "-c", code], log, timeout, cwd=folder, env=env)

    def demo(log, env, timeout):
        run([str(bin_dir / "hf-neuron"), "demo"], log, timeout, cwd=folder, env=env)

    def allreduce(log, env, timeout):
        (folder / "allreduce.py").write_text(ALLREDUCE)
        run([*torchrun, "allreduce.py"], log, timeout, cwd=folder, env=env)

    def generate_tp(log, env, timeout):
        run([str(bin_dir / "hf-neuron"), "tiny-model", "llama", "./tiny"], log, timeout, cwd=folder, env=env)
        (folder / "generate_tp.py").write_text(GENERATE_TP)
        run([*torchrun, "generate_tp.py", "./tiny"], log, timeout, cwd=folder, env=env)

    def check_and_report(log, env, timeout):
        run([str(bin_dir / "hf-neuron"), "check", "./tiny"], log, timeout, cwd=folder, env=env)
        run([str(bin_dir / "hf-neuron"), "compat", "report", "--html", "site"], log, timeout, cwd=folder, env=env)
        if "llama" not in (folder / "site" / "index.html").read_text():
            raise StepFailed("site/index.html has no llama row")

    def compat(log, env, timeout):
        before = set(folder.iterdir())
        run([str(bin_dir / "hf-neuron"), "compat", "--quick", "--no-progress"], log, timeout, cwd=folder, env=env)
        written = sorted(p.name for p in set(folder.iterdir()) - before)
        if len(written) != 1 or not written[0].endswith("-simulated.json"):
            raise StepFailed(f"expected one <transformers>-simulated.json in {folder}, found {written}")

    def compat_images(log, env, timeout):
        run([str(bin_dir / "hf-neuron"), "compat", "--images", "--quick", "--no-progress", "--check"], log, timeout,
            cwd=folder, env=env)
        written = sorted(p.name for p in (folder / "images").glob("*.json"))
        if len(written) != 1 or not written[0].endswith("-simulated.json"):
            raise StepFailed(f"expected one <transformers>-simulated.json in {folder / 'images'}, found {written}")

    return [
        ("hf_neuron imported from the environment", where),
        ("hf-neuron demo", demo),
        ("torchrun x2: init_process_group('neuron'), all_reduce", allreduce),
        ("torchrun x2: tiny llama, TP=2 greedy tokens == CPU", generate_tp),
        ("hf-neuron check ./tiny, compat report --html site", check_and_report),
        ("hf-neuron compat --quick (results in the current folder)", compat),
        ("hf-neuron compat --images --quick (results in ./images)", compat_images),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from _environments import environments_dir

    parser.add_argument("--venv", type=Path, default=environments_dir() / "wheel",
                        help="the environment to install into (default: %(default)s)")
    parser.add_argument("--fresh", action="store_true", help="recreate the environment")
    parser.add_argument("--keep", action="store_true", help="keep the folder the steps ran in")
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                        help="seconds per step (default: %(default)s; the first run compiles the C++ extensions)")
    args = parser.parse_args(argv)
    args.venv = args.venv.resolve()

    folder = Path(tempfile.mkdtemp(prefix="hf-neuron-wheel-check-"))
    logs = folder.parent / f"{folder.name}-logs"
    logs.mkdir()
    state: dict = {}

    def build(log, env, timeout):
        state["wheel"] = build_wheel(ROOT / "out" / "wheel")
        log.write(f"{state['wheel']}\n")

    def install(log, env, timeout):
        ensure_wheel_venv(args.venv, state["wheel"], args.fresh, log)

    steps = [("build the wheel", build), ("install it with " + TORCH, install), *user_steps(folder, args.venv)]
    env = user_env(args.venv)
    started = time.perf_counter()
    failed = None
    for number, (title, step) in enumerate(steps, 1):
        log_path = logs / f"{number}.log"
        step_started = time.perf_counter()
        error = None
        with open(log_path, "w") as log:
            try:
                step(log, env, args.timeout)
            except (StepFailed, subprocess.CalledProcessError) as exc:
                error = str(exc) if isinstance(exc, StepFailed) else f"{exc}\n{exc.stderr or ''}"
        seconds = time.perf_counter() - step_started
        print(f"[{number}/{len(steps)}] {title:58s} {seconds:7.1f} s  {'FAIL' if error else 'PASS'}", flush=True)
        if error:
            failed = (title, error, log_path)
            break
    print(f"total {time.perf_counter() - started:.0f} s; ran in {folder} (wheel {state.get('wheel')})")
    if failed:
        title, error, log_path = failed
        print(f"\n{title}: {error}\nlast {TAIL_LINES} lines of {log_path}:")
        print("\n".join(log_path.read_text(errors="replace").splitlines()[-TAIL_LINES:]))
        return 1
    if not args.keep:
        shutil.rmtree(folder)
        shutil.rmtree(logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
