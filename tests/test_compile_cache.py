"""``hf-neuron cache export/import``: the compiled-graph cache moves between machines with its manifest;
an import into another environment names each difference and writes nothing."""

import io
import json
import tarfile

import pytest
import torch

from hf_neuron import compile_cache
from hf_neuron.cli import main
from hf_neuron.simulator import graph_log, neff_cache


@pytest.fixture
def warmed(tmp_path, monkeypatch):
    """A cache directory holding the entries of two compiled graphs."""
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "source"))
    torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        f = torch.compile(lambda t: t.sin() + 1, backend="neuron")
        for rows in (2, 3):
            f(torch.ones(rows, 4, device="neuron"))
    return tmp_path / "source"


def _use(monkeypatch, directory):
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(directory))


def _rewrite_manifest(archive, out, **changes):
    with tarfile.open(archive, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == compile_cache.MANIFEST_NAME:
                data = json.dumps(dict(json.loads(data), **changes)).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


def test_export_then_import_restores_every_entry_and_hits(warmed, tmp_path, monkeypatch, capsys):
    archive = tmp_path / "graphs.tar.gz"
    assert main(["cache", "export", str(archive)]) == 0
    assert "exported 2 files" in capsys.readouterr().out

    _use(monkeypatch, tmp_path / "target")
    assert main(["cache", "import", str(archive)]) == 0
    assert "imported 2 files" in capsys.readouterr().out
    names = sorted(p.name for p in neff_cache.entries(tmp_path / "target"))
    assert names == sorted(p.name for p in neff_cache.entries(warmed))

    torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False), graph_log.count_graphs() as graphs:
        f = torch.compile(lambda t: t.sin() + 1, backend="neuron")
        for rows in (2, 3):
            f(torch.ones(rows, 4, device="neuron"))
    assert graphs.count == 2 and graphs.misses == 0


def test_manifest_names_the_environment(warmed, tmp_path):
    manifest = compile_cache.export_cache(tmp_path / "graphs.tar.gz")
    here = compile_cache.environment()
    assert {k: manifest[k] for k in compile_cache.MATCHED_FIELDS} == here
    assert here["device"] == "trn2 (simulated)" and here["transformers"]
    assert manifest["files"] == 2 and manifest["dynamo_artifacts"] is False


@pytest.mark.parametrize("field, value", [("transformers", "5.0.0"), ("torch_neuronx", "2.14.3"),
                                          ("device", "trn3"), ("logical_nc_config", 1)])
def test_import_into_another_environment_says_what_differs_and_imports_nothing(
        warmed, tmp_path, monkeypatch, capsys, field, value):
    archive = tmp_path / "graphs.tar.gz"
    compile_cache.export_cache(archive)
    other = _rewrite_manifest(archive, tmp_path / "other.tar.gz", **{field: value})
    _use(monkeypatch, tmp_path / "target")

    assert main(["cache", "import", str(other)]) == 2
    err = capsys.readouterr().err
    here = compile_cache.environment()[field]
    assert f"{field}: {value!r} in the cache, {here!r} here" in err and "nothing was imported" in err
    assert not (tmp_path / "target").exists()


@pytest.mark.parametrize("member", ["../escape.neff", "/abs.neff", "cache/../../escape.neff"])
def test_import_rejects_members_outside_the_cache(warmed, tmp_path, monkeypatch, member):
    archive = tmp_path / "graphs.tar.gz"
    compile_cache.export_cache(archive)
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "r:gz") as src, tarfile.open(bad, "w:gz") as dst:
        manifest = src.getmember(compile_cache.MANIFEST_NAME)
        dst.addfile(manifest, src.extractfile(manifest))
        info = tarfile.TarInfo(member)
        info.size = 1
        dst.addfile(info, io.BytesIO(b"x"))
    _use(monkeypatch, tmp_path / "target")
    with pytest.raises(compile_cache.CacheError, match="unexpected member"):
        compile_cache.import_cache(bad)
    assert not (tmp_path / "target").exists() or not any((tmp_path / "target").iterdir())
    assert not (tmp_path / "escape.neff").exists()


def _tampered(archive, out, change):
    """``archive`` with its first cache file's bytes replaced by ``change(bytes)`` (the manifest kept)."""
    with tarfile.open(archive, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        changed = False
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name != compile_cache.MANIFEST_NAME and not changed:
                data, changed = change(data), True
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


def test_a_tampered_archive_is_refused_and_nothing_is_written(warmed, tmp_path, monkeypatch, capsys):
    archive = tmp_path / "graphs.tar.gz"
    manifest = compile_cache.export_cache(archive)
    assert len(manifest["sha256"]) == manifest["files"] == 2
    _use(monkeypatch, tmp_path / "target")
    for name, change in (("flipped", lambda data: bytes([data[0] ^ 1]) + data[1:]), ("appended", lambda data: data + b"x")):
        bad = _tampered(archive, tmp_path / f"{name}.tar.gz", change)
        assert main(["cache", "import", str(bad)]) == 2
        err = capsys.readouterr().err
        assert "do not match the manifest's list and sha256 digests" in err and "nothing imported" in err
        assert not (tmp_path / "target").exists() or not any((tmp_path / "target").iterdir())
    unlisted = _rewrite_manifest(archive, tmp_path / "unlisted.tar.gz", sha256=None)
    with pytest.raises(compile_cache.CacheError, match="lists no file digests"):
        compile_cache.import_cache(unlisted)
    assert main(["cache", "import", str(archive)]) == 0  # the untouched archive imports


def test_import_help_says_to_import_only_trusted_caches(capsys):
    with pytest.raises(SystemExit):
        main(["cache", "import", "--help"])
    assert "only caches you made or trust" in " ".join(capsys.readouterr().out.split())


def test_clear_errors_for_bad_files_and_an_empty_cache(tmp_path, monkeypatch):
    _use(monkeypatch, tmp_path / "empty")
    with pytest.raises(compile_cache.CacheError, match="is empty: compile the workload"):
        compile_cache.export_cache(tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()
    with pytest.raises(compile_cache.CacheError, match="does not exist"):
        compile_cache.import_cache(tmp_path / "missing.tar.gz")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    with pytest.raises(compile_cache.CacheError, match="not a cache export"):
        compile_cache.import_cache(junk)


def test_without_a_known_cache_directory_the_error_says_which_variable(monkeypatch):
    monkeypatch.delenv(compile_cache.CACHE_DIR_ENV)
    monkeypatch.setattr(compile_cache, "_simulated", lambda: False)
    with pytest.raises(compile_cache.CacheError, match=compile_cache.CACHE_DIR_ENV):
        compile_cache.export_cache("x.tar.gz")
