"""The simulated compiler's persistent compiled-graph cache: stable keys, hits in a second process,
corrupt entries recompiled with a warning, atomic writes from concurrent processes."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from hf_neuron.simulator import graph_log, neff_cache

# A small compiled training step: the same code in every process that runs it.
STEP = textwrap.dedent("""
    import json, sys, torch
    from hf_neuron.simulator import graph_log
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("neuron")
    step = torch.compile(model, backend="neuron")
    for rows in (2, 3):
        step(torch.ones(rows, 8, device="neuron")).sum().backward()
    print(json.dumps([[r["cache"], r["cache_key"]] for r in graph_log.records()]), flush=True)
    # The records are out. Skip interpreter finalization: now and then the simulated device's
    # autograd worker thread, which ran the backward, aborts the process while Python finalizes
    # ("terminate called without an active exception"), after the script has done its work. That
    # exit problem is not what this test checks.
    import os
    os._exit(0)
""")


def _run_step(cache_dir, **env) -> list:
    out = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True,
                         env=dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(cache_dir), HF_NEURON_SIMULATOR="1",
                                  **env))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(neff_cache.CACHE_DIR_ENV, str(tmp_path / "neff"))
    return tmp_path / "neff"


def _compile_once(x):
    torch._dynamo.reset()
    with graph_log.count_graphs() as graphs:
        torch.compile(lambda t: (t * 2).relu().sum(-1), backend="neuron")(x)
    (record,) = graphs.records
    return record


def test_second_process_running_the_same_workload_hits_every_graph(tmp_path):
    first = _run_step(tmp_path / "neff")
    second = _run_step(tmp_path / "neff")
    assert [c for c, _ in first] == ["miss", "miss"]
    assert [c for c, _ in second] == ["hit", "hit"]
    assert [k for _, k in first] == [k for _, k in second]  # stable across processes
    assert len(neff_cache.entries(tmp_path / "neff")) == 2


def test_compiler_flags_are_part_of_the_key(tmp_path):
    _run_step(tmp_path / "neff")
    assert [c for c, _ in _run_step(tmp_path / "neff", NEURON_CC_FLAGS="--optlevel=1")] == ["miss", "miss"]


def test_shape_and_dtype_are_part_of_the_key(cache_dir):
    first = _compile_once(torch.ones(2, 4, device="neuron"))
    assert first["cache"] == "miss"
    assert _compile_once(torch.ones(2, 4, device="neuron"))["cache"] == "hit"
    assert _compile_once(torch.ones(3, 4, device="neuron"))["cache"] == "miss"
    assert _compile_once(torch.ones(2, 4, device="neuron", dtype=torch.bfloat16))["cache"] == "miss"
    assert len(neff_cache.entries()) == 3


@pytest.mark.parametrize("damage", ["truncated", "garbage", "tampered", "empty"])
def test_corrupt_entry_warns_and_recompiles(cache_dir, damage):
    x = torch.ones(2, 4, device="neuron")
    key = _compile_once(x)["cache_key"]
    path = neff_cache.entry_path(key)
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "tampered":
        path.write_bytes(raw.replace(b'"forward_nodes": ', b'"forward_nodes": 1'))
    else:
        path.write_bytes(b"")

    with pytest.warns(UserWarning, match="unreadable"):
        record = _compile_once(x)
    assert record["status"] == "compiled" and record["cache"] == "miss"
    assert neff_cache.read_entry(path) is not None  # rewritten whole
    assert _compile_once(x)["cache"] == "hit"


def test_unwritable_cache_directory_does_not_fail_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(neff_cache.CACHE_DIR_ENV, str(blocker / "neff"))
    with pytest.warns(UserWarning, match="cannot write"):
        record = _compile_once(torch.ones(2, 4, device="neuron"))
    assert record["status"] == "compiled" and record["cache"] == "miss"


def test_default_location_follows_torchneuron_debug_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(neff_cache.CACHE_DIR_ENV)
    monkeypatch.setenv(neff_cache.DEBUG_DIR_ENV, str(tmp_path))
    assert neff_cache.cache_dir() == tmp_path / "neff_cache"
    monkeypatch.delenv(neff_cache.DEBUG_DIR_ENV)
    assert str(neff_cache.cache_dir()) == "/tmp/neuron_backend/neff_cache"


def test_atomic_write_leaves_no_partial_file(tmp_path):
    path = tmp_path / "entry.neff"
    neff_cache.write_atomically(path, b"one")
    neff_cache.write_atomically(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["entry.neff"]
