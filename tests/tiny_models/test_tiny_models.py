"""The tiny-model factory: configs, tokenizer, checkpoints on disk, CLI (all CPU, offline, seconds)."""

from __future__ import annotations

import json

import pytest
import torch

from hf_neuron import tiny_models
from hf_neuron.tiny_models import (
    TinyModelError,
    build_tokenizer,
    model_class_for,
    save_tiny_model,
    tiny_config,
    tiny_model,
)

ROUND_TRIP_TYPES = ["llama", "qwen3", "mistral", "gemma2", "gpt2"]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _inputs(tokenizer):
    return tokenizer(["Hello world, this is a test.", "Hi"], return_tensors="pt", padding=True)


# --- tokenizer -------------------------------------------------------------------------------------------


def test_tokenizer_is_deterministic_byte_level_with_distinct_specials():
    tok = build_tokenizer()
    assert len(tok) == tiny_models.VOCAB_SIZE == 512
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    # Pinned: a change of corpus, merge order or layout changes every saved tiny model.
    assert tiny_models.tokenizer_fingerprint() == "658515472c33018a"
    assert build_tokenizer().get_vocab() == tok.get_vocab()
    text = "Caf\u00e9 \u4f60\u597d \U0001f600 x = torch.ones(2)"  # any text encodes (byte level)
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    assert all(i >= 16 for i in ids)  # no special token sneaks into plain text
    assert len(ids) < len(text.encode())  # the merges do merge


def test_tokenizer_pads_left_for_generation():
    tok = build_tokenizer()
    batch = _inputs(tok)
    assert batch["input_ids"][1, 0].item() == tok.pad_token_id
    assert batch["attention_mask"][1, 0].item() == 0 and batch["attention_mask"][1, -1].item() == 1


def test_chat_template_renders_turns_and_generation_prompt():
    tok = build_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids[-1] != tok.eos_token_id and ids.count(tok.eos_token_id) == 2
    # Assistant-only masks (TRL's assistant_only_loss) come from the {% generation %} block.
    full = tok.apply_chat_template(messages + [{"role": "assistant", "content": "Hello!"}], return_dict=True,
                                   return_assistant_tokens_mask=True)
    masked = [i for i, m in zip(full["input_ids"], full["assistant_masks"]) if m]
    assert tok.decode(masked) == "Hello!<|im_end|>"
    # Content given as a list of text parts renders the same.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert tok.apply_chat_template(parts, tokenize=False) == "<|im_start|>user\nHi<|im_end|>\n"


# --- configs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ROUND_TRIP_TYPES + ["qwen3_moe", "deepseek_v3", "gemma3_text"])
def test_tiny_config_shape_is_small_and_tensor_parallel_friendly(model_type):
    config = tiny_config(model_type)
    d = config.to_dict()
    hidden = d.get("hidden_size", d.get("n_embd"))
    heads = d.get("num_attention_heads", d.get("n_head"))
    assert hidden == 64
    assert heads % 2 == 0 and d.get("num_key_value_heads", heads) % 2 == 0
    for key in ("intermediate_size", "moe_intermediate_size"):
        if d.get(key):
            assert d[key] % 4 == 0, key
    assert d.get("max_position_embeddings", d.get("n_positions")) >= 2048
    assert config.vocab_size == len(build_tokenizer())
    assert (config.pad_token_id, config.eos_token_id) == (0, 2)


def test_hybrid_patterns_keep_every_kind_of_layer():
    gemma2 = tiny_config("gemma2")
    assert sorted(set(gemma2.layer_types)) == ["full_attention", "sliding_attention"]
    assert gemma2.sliding_window == 64
    # gemma3's 5:1 sliding/full pattern would give 2 sliding layers if cut naively.
    assert "full_attention" in tiny_config("gemma3_text").layer_types
    assert sorted(set(tiny_config("qwen3_next").layer_types)) == ["full_attention", "linear_attention"]
    # A hybrid whose class default has no attention at all is made hybrid by the override table.
    assert "full_attention" in tiny_config("granitemoehybrid").layer_types


def test_fewer_layers_keeps_every_periodic_kind_in_the_fewest_layers():
    """Jamba-v0.1 (attention every 8 layers from 4, experts every 2 from 1): three kinds of layer, kept in
    three layers with new offsets, not in the first five (four of them Mamba layers, the slow part of
    tracing); a config with a dense prefix or a per-layer list keeps its own path."""
    from transformers import JambaConfig

    from hf_neuron.tiny_models.configs import fewer_layers

    def kinds(config):
        return {(i % config.attn_layer_period == config.attn_layer_offset,
                 i % config.expert_layer_period == config.expert_layer_offset)
                for i in range(config.num_hidden_layers)}

    full = JambaConfig(num_hidden_layers=32, attn_layer_period=8, attn_layer_offset=4, expert_layer_period=2,
                       expert_layer_offset=1)
    reduced, kept = fewer_layers(full)
    assert kept == reduced.num_hidden_layers == 3
    assert kinds(reduced) == kinds(full) == {(False, False), (False, True), (True, False)}
    assert (reduced.attn_layer_period, reduced.expert_layer_period) == (8, 2)
    assert full.num_hidden_layers == 32  # the caller's config is not changed

    every_layer_moe = JambaConfig(num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=2,
                                  expert_layer_period=1, expert_layer_offset=0)
    reduced, kept = fewer_layers(every_layer_moe)
    assert kept == 2 and kinds(reduced) == kinds(every_layer_moe)


def test_with_layer_count_resizes_only_a_model_of_one_kind_of_layer():
    from transformers import Gemma2Config, JambaConfig, Qwen2Config

    from hf_neuron.tiny_models.configs import with_layer_count

    qwen2 = with_layer_count(Qwen2Config(num_hidden_layers=24), 4)  # a per-layer list of one value
    assert qwen2.num_hidden_layers == 4 and qwen2.layer_types == ["full_attention"] * 4
    assert with_layer_count(Gemma2Config(num_hidden_layers=4), 8) is None  # sliding and full layers
    assert with_layer_count(JambaConfig(), 8) is None  # kinds set by period and offset


def test_moe_and_mla_sizes_are_consistent():
    moe = tiny_config("qwen3_moe")
    assert (moe.num_experts, moe.num_experts_per_tok) == (4, 2)
    mla = tiny_config("deepseek_v3")
    assert mla.qk_head_dim == mla.qk_nope_head_dim + mla.qk_rope_head_dim
    assert mla.n_routed_experts % mla.n_group == 0 and mla.num_experts_per_tok <= mla.n_routed_experts
    assert mla.first_k_dense_replace == 1  # layer 0 dense, layer 1 MoE


@pytest.mark.parametrize("model_type", ["bert", "roberta", "reformer"])
def test_lm_heads_that_ask_whether_they_decode_are_decoders(model_type):
    """A BERT-family LM head is causal and caches only with ``is_decoder=True`` (upstream warns "add
    `is_decoder=True`" otherwise), as every checkpoint meant for generation sets."""
    assert tiny_config(model_type).is_decoder is True
    assert tiny_config(model_type, is_decoder=False).is_decoder is False  # a user's value still wins


def test_overrides_win_and_reach_nested_configs():
    assert tiny_config("llama", num_hidden_layers=4).num_hidden_layers == 4
    assert tiny_config("gemma3", text_config={"num_hidden_layers": 3}).text_config.num_hidden_layers == 3
    # A pattern the config derives still follows the user's pattern attributes.
    qwen2 = tiny_config("qwen2", use_sliding_window=True, max_window_layers=1)
    assert qwen2.layer_types == ["full_attention", "sliding_attention"]


def test_unknown_or_unsupported_types_say_what_to_do():
    with pytest.raises(TinyModelError, match="Did you mean: llama"):
        tiny_config("lama")
    with pytest.raises(TinyModelError, match="no causal-LM class"):
        tiny_config("vit")
    with pytest.raises(TinyModelError, match="deepseek_v3"):
        tiny_config("kimi_k2")
    with pytest.raises(TinyModelError, match="float32, bfloat16 or float16"):
        tiny_model("llama", dtype="int8")


def test_model_class_for_causal_and_multimodal_types():
    from transformers import LlamaForCausalLM, Mistral3ForConditionalGeneration

    assert model_class_for("llama") is LlamaForCausalLM
    assert model_class_for("mistral3") is Mistral3ForConditionalGeneration
    assert tiny_models.is_multimodal_text_only("mistral3") and not tiny_models.is_multimodal_text_only("llama")
    assert set(tiny_models.MULTIMODAL_TEXT_ONLY) <= set(tiny_models.known_model_types())


# --- models and checkpoints ------------------------------------------------------------------------------


def test_same_seed_same_weights_different_seed_different_weights():
    a, _ = tiny_model("llama", seed=0)
    b, _ = tiny_model("llama", seed=0)
    c, _ = tiny_model("llama", seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].dtype.is_floating_point and sa[k].std() > 0)


def test_building_does_not_disturb_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model("gpt2", seed=7)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("model_type", ROUND_TRIP_TYPES)
def test_round_trip_through_auto_classes_offline(model_type, tmp_path, offline):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = save_tiny_model(model_type, tmp_path / model_type, seed=5)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == model_type
    assert model.config.vocab_size == len(tokenizer)
    reference, _ = tiny_model(model_type, seed=5)
    batch = _inputs(tokenizer)
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, reference(**batch).logits)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    generated = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert generated.shape[-1] == prompt["input_ids"].shape[-1] + 3
    info = json.loads((out / "tiny_model.json").read_text())
    assert info["seed"] == 5 and info["model_class"] == type(model).__name__


def test_dtype_is_saved(tmp_path, offline):
    from transformers import AutoModelForCausalLM

    out = save_tiny_model("qwen3", tmp_path / "bf16", dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert model.dtype == torch.bfloat16


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3", "qwen3_5", "gemma3", "mistral3"])
def test_audit_builds_forwards_generates_and_reloads(model_type):
    # audit_one: forward, 3-token greedy generate, save -> Auto class and model_class_for reload, same logits.
    from hf_neuron.tiny_models.audit import audit_one

    row = audit_one(model_type)
    assert row["status"] == "pass", row
    assert not row["shape"].get("checks"), row["shape"]


def test_composite_types_save_the_composite_config(tmp_path, offline):
    from transformers import AutoModelForCausalLM

    out = save_tiny_model("qwen3_5", tmp_path / "qwen3_5")
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == "qwen3_5" and saved["architectures"] == ["Qwen3_5ForCausalLM"]
    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "Qwen3_5ForCausalLM"


def test_nested_configs_keep_their_own_values():
    # mistral3's text config turns the sliding window off, unlike MistralConfig's class default.
    assert tiny_config("mistral3").text_config.sliding_window is None
    assert tiny_config("mistral3").text_config.hidden_size == 64


# --- CLI -------------------------------------------------------------------------------------------------


def test_cli_writes_a_loadable_model(tmp_path, capsys, offline):
    from transformers import AutoModelForCausalLM

    from hf_neuron.cli import main

    out = tmp_path / "tiny-llama"
    assert main(["tiny-model", "llama", str(out), "--seed", "2"]) == 0
    assert "LlamaForCausalLM" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out)
    reference, _ = tiny_model("llama", seed=2)
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in model.state_dict().items())


def test_cli_bad_type_errors_before_writing(tmp_path, capsys):
    from hf_neuron.cli import main

    out = tmp_path / "never"
    assert main(["tiny-model", "lama", str(out)]) == 2
    assert "Did you mean: llama" in capsys.readouterr().err
    assert not out.exists()
    assert main(["tiny-model", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "llama" in listed and "mistral3" in listed
