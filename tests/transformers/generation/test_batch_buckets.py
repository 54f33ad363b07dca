"""Batch buckets: ``generate(batch_buckets=[...])`` pads a batch to the next bucket; the real rows' tokens
equal the unpadded run, and batches of any size up to the largest bucket compile only the buckets' graphs."""

import pytest
import torch

from hf_neuron.simulator import graph_log
from hf_neuron.testing.generation_workload import generate_batches, left_pad, workload_prompts
from hf_neuron.tiny_models import build_model
from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.generation.batch_buckets import FIX_NAME

SIZES = {"max_cache_len": 64, "prefill_chunk_size": 16, "max_new_tokens": 4}
LENGTHS = (5, 30, 17, 9, 44, 12, 3)


@pytest.fixture
def llama():
    return build_model("llama")


def _by_batch_size(model, prompts, **kwargs):
    return {b: generate_batches(model, prompts[:b], b, **SIZES, **kwargs)[0] for b in range(1, 6)}


def test_batches_of_1_to_5_rows_compile_the_three_buckets_only(llama, fresh_dynamo):
    prompts = workload_prompts(llama.config.vocab_size, LENGTHS)
    expected = {b: generate_batches(llama, prompts[:b], b, max_new_tokens=4)[0] for b in range(1, 6)}
    llama.to("neuron")
    with graph_log.count_graphs() as graphs:
        tokens = _by_batch_size(llama, prompts, batch_buckets=[1, 4, 8])
    assert sorted(graph_log.input_shape(r) for r in graphs.records) == [
        (1, 1), (1, 16), (4, 1), (4, 16), (8, 1), (8, 16)]
    for b in range(1, 6):
        assert tokens[b].shape == expected[b].shape and torch.equal(tokens[b], expected[b]), b


def test_without_the_fix_each_batch_size_compiles(llama, fresh_dynamo):
    prompts = workload_prompts(llama.config.vocab_size, LENGTHS)
    llama.to("neuron")
    llama.generation_config.batch_buckets = [1, 4, 8]  # an attribute upstream ignores
    try:
        with upstream_behaviour(FIX_NAME), graph_log.count_graphs() as upstream:
            _by_batch_size(llama, prompts)
        torch._dynamo.reset()
        with graph_log.count_graphs() as bucketed:
            _by_batch_size(llama, prompts)
    finally:
        del llama.generation_config.batch_buckets
    assert (upstream.count, bucketed.count) == (10, 6)


def test_dictionary_outputs_keep_the_real_rows(llama, fresh_dynamo):
    prompts = workload_prompts(llama.config.vocab_size, LENGTHS[:3])
    input_ids, attention_mask = left_pad(prompts, llama.generation_config.pad_token_id)
    llama.to("neuron")
    out = llama.generate(input_ids.to("neuron"), attention_mask=attention_mask.to("neuron"), do_sample=False,
                         return_dict_in_generate=True, output_scores=True, batch_buckets=[4], **SIZES)
    assert out.sequences.shape[0] == 3 and all(score.shape[0] == 3 for score in out.scores)
    assert len(out.scores) == SIZES["max_new_tokens"]


@pytest.mark.parametrize("buckets, rows, message", [
    ([1, 4], 5, "larger than the largest of batch_buckets"),
    ([0, 4], 1, "positive int"),
    ([4, 4], 1, "repeats"),
    ("4", 1, "an int or a list"),
])
def test_bad_batch_buckets_raise_before_anything_compiles_or_is_allocated(llama, buckets, rows, message, fresh_dynamo):
    from hf_neuron.simulator.distributed import neuron_allocations

    prompts = workload_prompts(llama.config.vocab_size, LENGTHS[:rows])
    input_ids, attention_mask = left_pad(prompts, llama.generation_config.pad_token_id)
    llama.to("neuron")
    input_ids, attention_mask = input_ids.to("neuron"), attention_mask.to("neuron")
    before = neuron_allocations()
    with graph_log.count_graphs() as graphs, pytest.raises(ValueError, match=message):
        llama.generate(input_ids, attention_mask=attention_mask, batch_buckets=buckets, **SIZES)
    assert graphs.count == 0 and neuron_allocations() == before


def test_multimodal_inputs_are_not_padded(llama):
    prompts = workload_prompts(llama.config.vocab_size, LENGTHS[:2])
    input_ids, attention_mask = left_pad(prompts, llama.generation_config.pad_token_id)
    llama.to("neuron")
    with pytest.raises(ValueError, match="pads batches of text inputs"):
        llama.generate(input_ids.to("neuron"), attention_mask=attention_mask.to("neuron"),
                       pixel_values=torch.zeros(2, 3, 8, 8, device="neuron"), batch_buckets=[4], **SIZES)
