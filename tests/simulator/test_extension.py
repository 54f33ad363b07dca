"""Building the simulator's C++ extension: an interrupted earlier build must not hang later ones."""

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


def test_each_checkout_of_the_sources_builds_in_its_own_folder(tmp_path, monkeypatch):
    # torch's builder writes the absolute source paths into the folder's ninja file: two checkouts
    # sharing a folder (a clone beside a worktree) would recompile the extension on every switch.
    import shutil

    monkeypatch.setenv("HF_NEURON_CACHE", str(tmp_path / "cache"))
    copy = shutil.copytree(ext._CSRC, tmp_path / "checkout" / "csrc")
    first = ext._build_dir(ext._CSRC, "simulator")
    assert ext._build_dir(ext._CSRC, "simulator") == first
    assert ext._build_dir(copy, "simulator") != first
