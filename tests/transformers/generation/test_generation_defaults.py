"""Generation defaults for a model on Neuron, applied only where the user set nothing; the
max_cache_len check; the tokenizer padding helper."""

import warnings

import pytest
import torch
from transformers import CompileConfig, StaticCache

from hf_neuron.simulator import graph_log
from hf_neuron.tiny_models import build_model, build_tokenizer
from hf_neuron.transformers import DEFAULT_MAX_CACHE_LEN, tokenize_prompts, upstream_behaviour
from hf_neuron.transformers.generation.defaults import DEFAULTS_FIX, FIT_FIX
from hf_neuron.transformers.generation.steps import cache_keyword


@pytest.fixture
def llama():
    return build_model("llama")


def _prompt(length, seed=0):
    return torch.randint(3, 500, (1, length), generator=torch.Generator().manual_seed(seed))


def _generate(model, input_ids, max_new_tokens=3, **kwargs):
    with graph_log.count_graphs() as graphs, torch.no_grad():
        out = model.generate(
            input_ids.to(model.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            return_dict_in_generate=True,
            **kwargs,
        )
    return out, graphs.count


def test_defaults_compile_with_static_cache(llama, fresh_dynamo):
    # Short and long prompts over the default prefill buckets, 64 and 512 tokens: one graph each and
    # the decode graph (900 tokens cannot be padded to 1024 and leave room for 3 new tokens in the
    # default 1024-slot cache: its last chunk overlaps or its tail runs through the decode graph).
    prompts = [_prompt(length, seed) for seed, length in enumerate((40, 300, 470, 900))]
    expected = [llama.generate(prompt, max_new_tokens=3, do_sample=False) for prompt in prompts]
    llama.to("neuron")
    with graph_log.count_graphs() as graphs:
        outs = [_generate(llama, prompt)[0] for prompt in prompts]
    for out, want in zip(outs, expected):
        assert isinstance(out.past_key_values, StaticCache)
        assert out.past_key_values.get_max_length() == DEFAULT_MAX_CACHE_LEN
        assert torch.equal(out.sequences.cpu(), want)
    assert sorted(graph_log.input_shape(r) for r in graphs.records) == [(1, 1), (1, 64), (1, 512)]


def test_without_the_fix_nothing_compiles(llama, fresh_dynamo):
    llama.to("neuron")
    with upstream_behaviour(DEFAULTS_FIX):
        out, graphs = _generate(llama, _prompt(20))
    assert not isinstance(out.past_key_values, StaticCache)
    assert graphs == 0


def test_user_values_win(llama, fresh_dynamo):
    llama.to("neuron")
    out, graphs = _generate(llama, _prompt(20), cache_implementation="dynamic")
    assert graphs == 0 and not isinstance(out.past_key_values, StaticCache)

    out, graphs = _generate(llama, _prompt(20), max_cache_len=64, prefill_chunk_size=16)
    assert out.past_key_values.get_max_length() == 64
    assert graphs == 2


@pytest.mark.parametrize("keyword", sorted({"past_key_values", cache_keyword()}))
def test_a_cache_you_pass_wins(llama, fresh_dynamo, keyword):
    """Under the old keyword and the installed release's own: no default cache, nothing compiled."""
    from transformers import DynamicCache

    prompt = _prompt(20)
    expected = llama.generate(prompt, max_new_tokens=3, do_sample=False)
    llama.to("neuron")
    cache = DynamicCache(config=llama.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the old keyword is deprecated on newer releases
        out, graphs = _generate(llama, prompt, **{keyword: cache})
    assert out.past_key_values is cache and graphs == 0
    assert torch.equal(out.sequences.cpu(), expected)


def test_model_on_cpu_is_left_alone(llama, fresh_dynamo):
    out, graphs = _generate(llama, _prompt(20))
    assert graphs == 0 and not isinstance(out.past_key_values, StaticCache)


def test_neuron_compile_config_gets_static_default_mode(llama, fresh_dynamo):
    llama.to("neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, graphs = _generate(llama, _prompt(20), max_cache_len=64, compile_config=CompileConfig(backend="neuron"))
    assert graphs == 2
    assert not [w for w in caught if "mode=" in str(w.message)]


def test_prompt_that_does_not_fit_raises_before_compiling(llama, fresh_dynamo):
    llama.to("neuron")
    with graph_log.count_graphs() as graphs, pytest.raises(ValueError, match=r"max_cache_len=64.*N >= 70"):
        llama.generate(_prompt(20).to("neuron"), max_new_tokens=50, max_cache_len=64)
    assert graphs.count == 0
    assert not hasattr(llama, "_previous_max_cache_length")  # no cache was sized for it


def test_without_the_check_the_cache_grows(llama, fresh_dynamo):
    llama.to("neuron")
    with upstream_behaviour(FIT_FIX):
        out, _ = _generate(llama, _prompt(20), max_new_tokens=50, max_cache_len=64)
    assert out.past_key_values.get_max_length() > 64


def test_tokenizer_helper_pads_like_generate(llama, fresh_dynamo):
    tokenizer = build_tokenizer()
    texts = ["Hello there", "The capital of France is a city with many bridges and"]
    padded = tokenize_prompts(tokenizer, texts, prefill_chunk_size=16)
    assert padded["input_ids"].shape[1] % 16 == 0
    assert padded["attention_mask"][:, 0].tolist() == [0, 0]  # left padding
    unpadded = tokenizer(texts, padding=True, padding_side="left", return_tensors="pt")

    llama.to("neuron")
    kwargs = dict(max_new_tokens=3, do_sample=False, max_cache_len=64, prefill_chunk_size=16)
    with graph_log.count_graphs() as graphs, torch.no_grad():
        a = llama.generate(**padded.to("neuron"), **kwargs)
        b = llama.generate(**unpadded.to("neuron"), **kwargs)
    assert graphs.count == 2  # same shapes: generate padded the second batch the same way
    assert torch.equal(a[:, -3:].cpu(), b[:, -3:].cpu())


def test_chat_helper_pads_to_the_chunk_size():
    from hf_neuron.transformers import tokenize_chats

    tokenizer = build_tokenizer()
    chats = [[{"role": "user", "content": "Hi"}], [{"role": "user", "content": "Tell me about Paris, please."}]]
    batch = tokenize_chats(tokenizer, chats, prefill_chunk_size=16)
    assert batch["input_ids"].shape[1] % 16 == 0
    assert batch["attention_mask"][:, 0].tolist() == [0, 0]
    assert batch["attention_mask"][:, -1].tolist() == [1, 1]
