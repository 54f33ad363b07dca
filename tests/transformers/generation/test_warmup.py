"""``warmup``: after it, generation traffic with any prompt length and a warmed batch size compiles no
graph; a fresh process on the warmed (or an imported) compiled-graph cache compiles nothing either."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_neuron.graphs import count_graphs
from hf_neuron.simulator import neff_cache
from hf_neuron.testing.generation_workload import generate_batches, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers import warmup

WORKER = Path(__file__).with_name("_cold_start_worker.py")
PROMPT_LENGTHS = (5, 64, 130, 257, 388, 500)  # over the default prefill buckets, 64 and 512 tokens


def _worker(mode, model_dir, out, cache_dir, nproc=None, **env):
    environment = dict(os.environ, HF_NEURON_SIMULATOR="1", TORCH_NEURONX_NEFF_CACHE_DIR=str(cache_dir), **env)
    launcher = [sys.executable] if nproc is None else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    proc = subprocess.run([*launcher, str(WORKER), mode, str(model_dir), str(out)], env=environment,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return None if nproc else json.loads(Path(out).read_text())


def test_after_warmup_mixed_traffic_compiles_no_graph_with_cpu_tokens(fresh_dynamo):
    model = build_model("llama")
    prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS)
    expected = {b: generate_batches(model, prompts, b, max_new_tokens=5) for b in (1, 2)}
    model.to("neuron")

    report = warmup(model, batch_sizes=[1, 2], progress=False)
    assert report.graphs == 6 and (report.max_cache_len, report.prefill_buckets) == (1024, [64, 512])
    assert report.shapes == [[1, 1], [1, 64], [1, 512], [2, 1], [2, 64], [2, 512]]

    with count_graphs() as graphs:
        tokens = {b: generate_batches(model, prompts, b, max_new_tokens=5) for b in (1, 2)}
    assert graphs.count == 0
    for b in (1, 2):
        for got, want in zip(tokens[b], expected[b]):
            assert torch.equal(got, want)


def test_without_warmup_the_same_traffic_compiles(fresh_dynamo):
    """The control: the traffic itself compiles its graphs when nothing warmed them (short prompts: the
    64-token bucket and decode, per batch size)."""
    model = build_model("llama").to("neuron")
    prompts = workload_prompts(model.config.vocab_size, PROMPT_LENGTHS[:2])
    with count_graphs() as graphs:
        for b in (1, 2):
            generate_batches(model, prompts, b, max_new_tokens=2)
    assert graphs.count == 4


def test_fresh_process_on_a_warmed_or_imported_cache_records_no_miss(tiny_llama_dir, tmp_path, monkeypatch):
    warmed = tmp_path / "warmed"
    first = _worker("warmup", tiny_llama_dir, tmp_path / "warmup.json", warmed)
    assert first["graphs"] == 6 and first["misses"] == 6
    cold = _worker("traffic", tiny_llama_dir, tmp_path / "cold.json", tmp_path / "empty")
    assert cold["graphs"] == 6 and cold["misses"] == 6  # the control: a cold process compiles

    served = _worker("traffic", tiny_llama_dir, tmp_path / "served.json", warmed)
    assert served["graphs"] == 6 and served["misses"] == 0
    assert served["tokens"] == cold["tokens"]
    assert sorted(served["keys"]) == sorted(first["keys"])

    # another machine: export from the warmed cache, import into an empty one, serve there
    from hf_neuron.cli import main

    archive = tmp_path / "graphs.tar.gz"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(warmed))
    assert main(["cache", "export", str(archive)]) == 0
    imported_dir = tmp_path / "imported"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(imported_dir))
    assert main(["cache", "import", str(archive)]) == 0
    imported = _worker("traffic", tiny_llama_dir, tmp_path / "imported.json", imported_dir)
    assert imported["graphs"] == 6 and imported["misses"] == 0
    assert imported["tokens"] == cold["tokens"]


@pytest.mark.distributed
def test_concurrent_four_rank_warmup_loses_no_entry(tiny_llama_dir, tmp_path):
    """Four processes warm up at once into one cache: batch size 1 on every rank (the same entries
    written four times), and a batch size of each rank's own."""
    cache = tmp_path / "shared"
    _worker("warmup", tiny_llama_dir, tmp_path / "rank", cache, nproc=4)
    keys = set()
    for rank in range(4):
        result = json.loads((tmp_path / f"rank.{rank}").read_text())
        assert result["graphs"] == 4
        keys.update(result["keys"])
    assert len(keys) == 2 + 4 * 2
    entries = neff_cache.entries(cache)
    assert {p.name.removesuffix(neff_cache.ENTRY_SUFFIX) for p in entries} == keys
    assert all(neff_cache.read_entry(p) is not None for p in entries)
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in entries)  # no temporary file left


def test_warmup_of_prefill_and_batch_buckets_then_any_traffic_compiles_nothing(fresh_dynamo):
    """Prefill buckets 4 and 16, batch buckets 1 and 4: warm-up compiles 3 graphs per batch bucket, then
    batches of 1-4 rows with prompts of every length up to the cache compile none, with CPU tokens."""
    model = build_model("llama")
    lengths = range(1, 46)
    prompts = workload_prompts(model.config.vocab_size, lengths)
    expected = {b: generate_batches(model, prompts, b, max_new_tokens=3) for b in (1, 3, 4)}
    model.to("neuron")
    model.generation_config.batch_buckets = [1, 4]
    try:
        report = warmup(model, batch_sizes=[1, 4], max_cache_len=48, prefill_chunk_size=[16, 4], progress=False)
        assert report.graphs == 6 and report.prefill_buckets == [4, 16]
        assert report.shapes == [[1, 1], [1, 4], [1, 16], [4, 1], [4, 4], [4, 16]]
        with count_graphs() as graphs:
            tokens = {b: generate_batches(model, prompts, b, max_new_tokens=3, max_cache_len=48,
                                          prefill_chunk_size=[16, 4]) for b in (1, 3, 4)}
    finally:
        del model.generation_config.batch_buckets
    assert graphs.count == 0
    for b in (1, 3, 4):
        assert all(torch.equal(got, want) for got, want in zip(tokens[b], expected[b])), b


def test_warmup_needs_a_model_on_neuron():
    with pytest.raises(ValueError, match="device_map='neuron'"):
        warmup(build_model("llama"), batch_sizes=[1])


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_sizes": [0]}, "positive integers"),
    ({"batch_sizes": [1], "max_cache_len": 64, "prefill_chunk_size": 64}, "no room"),
    ({"batch_sizes": [1], "max_cache_len": 64, "prefill_chunk_size": [16, 16]}, "repeats"),
    ({"batch_sizes": [1], "max_cache_len": 64, "prefill_chunk_size": [16, 128]}, "longer than max_cache_len"),
])
def test_warmup_rejects_bad_settings_before_compiling(kwargs, message):
    model = build_model("llama").to("neuron")
    with count_graphs() as graphs, pytest.raises(ValueError, match=message):
        warmup(model, progress=False, **kwargs)
    assert graphs.count == 0
