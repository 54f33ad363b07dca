"""Building the simulator's C++ extension: an interrupted earlier build must not hang later ones."""

from pathlib import Path

import pytest
from torch.utils import cpp_extension

import hf_neuron.simulator._extension as ext


@pytest.mark.parametrize("builder_kind", ["file baton", "os lock"])
def test_leftover_lock_of_an_interrupted_build_is_removed(tmp_path, monkeypatch, capsys, builder_kind):
    # torch's builder before 2.14 marks a build in progress with a `lock` file in the build folder
    # (`FileBaton`); a build killed midway (Ctrl-C during the first use) leaves it, and torch's own
    # loader then waits for it forever. Loading must notice the leftover before handing the folder to
    # torch's builder. torch 2.14 holds an OS lock on that file and keeps it: it is no leftover there.
    # The folder is a private one: the shared build folder is loaded by other test processes at
    # the same time, and any of them may remove the leftover first.
    if builder_kind == "file baton":
        monkeypatch.setattr(cpp_extension, "FileBaton", object, raising=False)
    else:
        monkeypatch.delattr(cpp_extension, "FileBaton", raising=False)
    leftover = tmp_path / "lock"
    leftover.touch()
    seen = {}

    def builder(**kwargs):
        seen["folder"] = kwargs["build_directory"]
        seen["lock left"] = leftover.exists()
        return "module"

    monkeypatch.setattr(ext, "_build_dir", lambda csrc, kind: tmp_path)
    monkeypatch.setattr(cpp_extension, "load", builder)
    assert ext.build_and_load("m", ext._CSRC, ext._SOURCES, "simulator", None) == "module"
    blocking = builder_kind == "file baton"
    assert seen == {"folder": str(tmp_path), "lock left": not blocking}
    assert ("left by an interrupted build" in capsys.readouterr().err) == blocking


def test_build_folder_without_leftover_is_left_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ext, "_build_dir", lambda csrc, kind: tmp_path)
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: "module")
    assert ext.build_and_load("m", ext._CSRC, ext._SOURCES, "simulator", None) == "module"
    assert "interrupted" not in capsys.readouterr().err


def test_checkouts_of_the_same_sources_share_one_build_and_a_fresh_clone_rebuilds_nothing(tmp_path, monkeypatch):
    # torch's builder writes the source paths into the folder's ninja file and rebuilds a source newer
    # than its object: compiling a checkout's own files would rebuild after every fresh clone (new file
    # dates) and on every switch between a clone and a worktree. The build compiles copies kept in the
    # folder, which is keyed by the sources' content.
    import os
    import shutil

    monkeypatch.setenv("HF_NEURON_CACHE", str(tmp_path / "cache"))
    clone = shutil.copytree(ext._CSRC, tmp_path / "clone" / "csrc")
    for path in clone.iterdir():  # a fresh clone: every file newer than anything built before
        os.utime(path, (path.stat().st_mtime + 3600,) * 2)
    seen = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: seen.append(kwargs) or "module")
    assert ext.build_and_load("m", ext._CSRC, ext._SOURCES, "simulator", None) == "module"
    assert ext.build_and_load("m", clone, ext._SOURCES, "simulator", None) == "module"
    first, second = seen
    assert first["build_directory"] == second["build_directory"] and first["sources"] == second["sources"]
    folder = ext._build_dir(ext._CSRC, "simulator")
    for source in first["sources"]:
        copy = Path(source)
        assert copy.parent == folder / "src"
        assert copy.read_bytes() == (ext._CSRC / copy.name).read_bytes()
        assert copy.stat().st_mtime < (clone / copy.name).stat().st_mtime
    # changed sources build in another folder
    (clone / "ops.cpp").write_text((clone / "ops.cpp").read_text() + "\n// changed\n")
    assert ext._build_dir(clone, "simulator") != folder
