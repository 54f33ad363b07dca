"""A workload's compiled graphs, packed once and reused on every instance of a fleet.

TorchNeuron keeps each compiled graph (NEFF) under ``TORCH_NEURONX_NEFF_CACHE_DIR``; a process handed
a graph that is already there loads it instead of running neuronx-cc. This module moves that
directory between machines, together with Dynamo's own cache artifacts
(``torch.compiler.save_cache_artifacts``) when a warm-up recorded any, and a manifest of the
environment that compiled them. A compiled graph is only valid for the same compiler, framework and
device kind, so an import into an environment that differs in any of them is refused, naming each
difference, before anything is written; so is an archive whose files do not match the sha256 digests
its manifest lists. An import loads compiled code (Dynamo's cache artifacts are pickled and unpickled
at import): import only caches you made or trust, as you would a pickle.

    hf-neuron warmup MODEL --batch-sizes 1,4      # compile the planned graphs once
    hf-neuron cache export graphs.tar.gz          # pack them
    hf-neuron cache import graphs.tar.gz          # on every new instance: 0 compiles
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from hf_neuron.simulator.neff_cache import CACHE_DIR_ENV, write_atomically

MANIFEST_NAME = "manifest.json"
CACHE_PREFIX = "cache/"
#: Dynamo's cache artifacts, saved into the cache directory by a warm-up (absent when Dynamo had none).
DYNAMO_ARTIFACTS_NAME = "hf_neuron-dynamo-artifacts.bin"
#: 2: the manifest holds every file's sha256, checked before an import writes anything.
FORMAT = 2
#: Manifest fields that must equal the importing environment's.
MATCHED_FIELDS = ("hf_neuron", "torch", "torch_neuronx", "transformers", "device", "logical_nc_config")


class CacheError(ValueError):
    """A cache file or directory that cannot be exported or imported as asked; the message says what to do."""


def _simulated() -> bool:
    try:
        from hf_neuron.simulator import is_simulated
    except ImportError:
        return False
    return is_simulated()


def cache_dir() -> Path | None:
    """Where compiled graphs are kept: ``$TORCH_NEURONX_NEFF_CACHE_DIR``, the simulator's default, or None."""
    if _simulated():
        from hf_neuron.simulator.neff_cache import cache_dir as simulated_cache_dir

        return simulated_cache_dir()
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    return Path(explicit).expanduser() if explicit else None


def _require_cache_dir() -> Path:
    directory = cache_dir()
    if directory is None:
        raise CacheError(
            f"no compiled-graph cache directory is known: set {CACHE_DIR_ENV} to the directory TorchNeuron "
            f"caches its compiled graphs in (the same value for warm-up, export, import and serving)."
        )
    return directory


def cache_files(directory: Path | None = None) -> list[Path]:
    """Every file of the cache directory, relative to it (writers' temporary dot-files left out)."""
    directory = directory or cache_dir()
    if directory is None or not directory.is_dir():
        return []
    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                files.append((Path(root) / name).relative_to(directory))
    return files


def entry_names() -> set[str] | None:
    """Names of the cache directory's top-level entries (None when no directory is known)."""
    directory = cache_dir()
    if directory is None:
        return None
    if not directory.is_dir():
        return set()
    return {p.name for p in directory.iterdir() if not p.name.startswith(".") and p.name != DYNAMO_ARTIFACTS_NAME}


def environment() -> dict[str, Any]:
    """What a compiled graph depends on: the manifest fields an import must match."""
    import torch

    from hf_neuron import __version__
    from hf_neuron.versions import installed_version

    if _simulated():
        from hf_neuron.simulator.config import host_from_env
        from hf_neuron.simulator.torch_neuronx_shim import SIMULATED_VERSION

        host = host_from_env()
        torch_neuronx, device, lnc = SIMULATED_VERSION, f"{host.instance_family} (simulated)", host.logical_nc_config
    else:
        torch_neuronx = installed_version("torch-neuronx")
        neuron = getattr(torch, "neuron", None)
        device = neuron.get_device_properties(0).name if neuron is not None and neuron.is_available() else None
        lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2"))
    return {
        "hf_neuron": __version__,
        "torch": torch.__version__,
        "torch_neuronx": torch_neuronx,
        "transformers": installed_version("transformers"),
        "device": device,
        "logical_nc_config": lnc,
    }


def save_dynamo_artifacts() -> bool:
    """Write this process's Dynamo cache artifacts into the cache directory (False when there are none)."""
    import torch

    directory = cache_dir()
    saved = torch.compiler.save_cache_artifacts()
    if directory is None or saved is None:
        return False
    data, _info = saved
    if not data:
        return False
    write_atomically(directory / DYNAMO_ARTIFACTS_NAME, data)
    return True


def export_cache(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Pack the cache directory and a manifest into ``path`` (a .tar.gz); returns the manifest."""
    directory = _require_cache_dir()
    files = cache_files(directory)
    if not files:
        raise CacheError(
            f"the compiled-graph cache {directory} is empty: compile the workload's graphs first "
            f"(`hf-neuron warmup MODEL ...`, or one run of the workload) with the same {CACHE_DIR_ENV}."
        )
    manifest = dict(environment(), format=FORMAT, files=len(files),
                    dynamo_artifacts=(directory / DYNAMO_ARTIFACTS_NAME).is_file(),
                    sha256={relative.as_posix(): _sha256((directory / relative).open("rb")) for relative in files})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with tarfile.open(temporary, "w:gz") as tar:
            data = json.dumps(manifest, indent=1, sort_keys=True).encode()
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for relative in files:
                tar.add(directory / relative, arcname=CACHE_PREFIX + relative.as_posix(), recursive=False)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return manifest


def read_manifest(tar: tarfile.TarFile, path: Path) -> dict[str, Any]:
    try:
        member = tar.getmember(MANIFEST_NAME)
        manifest = json.loads(tar.extractfile(member).read())
    except (KeyError, AttributeError, ValueError) as e:
        raise CacheError(f"{path} has no readable {MANIFEST_NAME}: it was not written by `hf-neuron cache export`") from e
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path} is cache format {manifest.get('format')!r}; this hf_neuron reads format {FORMAT}")
    return manifest


def differences(manifest: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """One line per manifest field that differs from this environment."""
    here = here or environment()
    return [
        f"{field}: {manifest.get(field)!r} in the cache, {here.get(field)!r} here"
        for field in MATCHED_FIELDS
        if manifest.get(field) != here.get(field)
    ]


def _in_cache(member: tarfile.TarInfo) -> str:
    """An archive member's path inside the cache directory."""
    return member.name[len(CACHE_PREFIX):]


def _sha256(stream) -> str:
    digest = hashlib.sha256()
    with stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_contents(tar: tarfile.TarFile, members: list[tarfile.TarInfo], manifest: dict[str, Any], path: Path) -> None:
    """Every file of the archive is one the manifest lists, with its sha256, and none is missing."""
    listed = manifest.get("sha256")
    if not isinstance(listed, dict):
        raise CacheError(f"{path}: its manifest lists no file digests; nothing imported")
    names = {_in_cache(member): member for member in members}
    wrong = sorted(set(names) ^ set(listed))
    wrong += sorted(name for name, member in names.items()
                    if name in listed and _sha256(tar.extractfile(member)) != listed[name])
    if wrong:
        raise CacheError(f"{path}: {len(wrong)} file(s) do not match the manifest's list and sha256 digests "
                         f"({', '.join(wrong[:3])}{', ...' if len(wrong) > 3 else ''}): the archive was changed "
                         "after `hf-neuron cache export`; nothing imported")


def _cache_members(tar: tarfile.TarFile, path: Path) -> list[tarfile.TarInfo]:
    members = []
    for member in tar.getmembers():
        if member.name == MANIFEST_NAME:
            continue
        relative = _in_cache(member)
        parts = Path(relative).parts
        if (not member.name.startswith(CACHE_PREFIX) or not member.isfile() or not parts
                or Path(relative).is_absolute() or ".." in parts):
            raise CacheError(f"{path}: unexpected member {member.name!r}; nothing imported")
        members.append(member)
    return members


def import_cache(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Unpack an exported cache into this machine's cache directory; returns the manifest with
    ``imported`` (files written). Raises :class:`CacheError`, with nothing written, when the file is
    not an export or was made in an environment that differs from this one."""
    import torch

    path = Path(path)
    directory = _require_cache_dir()
    if not path.is_file():
        raise CacheError(f"{path} does not exist: pass the file `hf-neuron cache export FILE` wrote")
    try:
        tar = tarfile.open(path, "r:gz")
    except (tarfile.TarError, OSError) as e:
        raise CacheError(f"{path} is not a cache export (.tar.gz): {e}") from e
    with tar:
        manifest = read_manifest(tar, path)
        differ = differences(manifest)
        if differ:
            raise CacheError(
                f"{path} was compiled in another environment; its graphs would not load here, so nothing was "
                f"imported:\n  " + "\n  ".join(differ)
                + "\nExport the cache again from a machine with this environment (or install the same releases)."
            )
        members = _cache_members(tar, path)
        _check_contents(tar, members, manifest, path)
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory, prefix=".import-") as staging:
            tar.extractall(staging, members=members, filter="data")
            for member in members:
                target = directory / _in_cache(member)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(Path(staging) / member.name, target)
    artifacts = directory / DYNAMO_ARTIFACTS_NAME
    if artifacts.is_file():
        torch.compiler.load_cache_artifacts(artifacts.read_bytes())
    return dict(manifest, imported=len(members))
