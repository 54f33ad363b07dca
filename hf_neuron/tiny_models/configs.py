"""Tiny configs for any Transformers ``model_type``: a generic shrink plus a small override table.

The generic shrink starts from the config class's own defaults (the released model's shape), then
rewrites every attribute whose *name* says it is a size (hidden, intermediate, heads, head dim, expert
counts, layer counts, window, positions...) at every level of the config (nested ``text_config``,
``vision_config``, ...). Per-layer patterns (``layer_types``, ``mlp_layer_types``, hybrid block lists,
index lists such as ``full_attn_idxs``) are cut down to the fewest layers that still contain every
distinct kind of layer of the original, so a sliding+full or mamba+attention model stays hybrid.
What the names cannot express lives in :data:`OVERRIDES`, keyed by the config's ``model_type``.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
import re
from typing import Any

from . import tokenizer as tok

# Target shape. Heads and kv heads stay divisible by 2 and intermediate sizes by 4 (tensor parallel
# degree 2 must shard them); positions cover max_cache_len up to 1024 with room to spare.
HIDDEN = 64
INTERMEDIATE = 128
MOE_INTERMEDIATE = 32
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
LAYERS = 2
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
MAX_POSITIONS = 2048
SLIDING_WINDOW = 64
MAX_LAYERS = 6  # cap on layers kept to cover every distinct layer kind

# The four top-100 model types that transformers ships only outside MODEL_FOR_CAUSAL_LM_MAPPING
# (as multimodal wrappers); built with the image-text-to-text class and used text-only.
MULTIMODAL_TEXT_ONLY = ("kimi_k25", "mistral3", "muse_glimmer", "mistral4")

# Known popular types that need remote code (not in transformers): a clear error, not a guess.
REMOTE_CODE_ONLY = {"kimi_k2": "Kimi-K2 ships its own modeling code (trust_remote_code); its architecture is "
                               "DeepSeek-V3: use model_type 'deepseek_v3'."}


# Types whose multimodal class needs a library that may be absent, and the text decoder built in its
# place then: Gemma 3n's vision tower is a timm model, and timm needs torchvision, whose PyPI wheel
# does not load beside the CPU torch build. The text decoder is what text generation runs.
TEXT_DECODER_WITHOUT = {"gemma3n": ("gemma3n_text", "timm")}


def text_decoder_substitute(model_type: str) -> tuple[str, str] | None:
    """``(type built instead, why)`` when `model_type`'s full class cannot be built here, else None."""
    import importlib.util

    entry = TEXT_DECODER_WITHOUT.get(model_type)
    if entry is None or importlib.util.find_spec(entry[1]) is not None:
        return None
    text_type, library = entry
    return text_type, (f"its multimodal class needs {library}, which is not installed: built as its text "
                       f"decoder ({text_type!r})")


def built_type(model_type: str) -> str:
    """The model type the factory builds for `model_type` (itself, or its text decoder's)."""
    substitute = text_decoder_substitute(model_type)
    return substitute[0] if substitute else model_type


# Speculative-decoding draft models: their forward reads the target model's kv states, so they are no
# standalone causal LM (and transformers cannot build them with every layer kv-shared).
DRAFT_ONLY = {
    "gemma4_assistant": "gemma4",
    "gemma4_unified_assistant": "gemma4_unified",
}


class TinyModelError(ValueError):
    """A model type the tiny-model factory cannot build (unknown, or not a causal LM)."""


def _cap(value):
    return lambda old, ctx: (min(old, value) if isinstance(old, int) and not isinstance(old, bool) else old)


def _kv_heads(old, ctx):
    if old is None or not isinstance(old, int):
        return old
    heads = ctx.get("heads")
    if old == 1:
        return 1  # multi-query attention stays multi-query
    if heads is not None and old == heads:
        return HEADS  # multi-head stays multi-head
    return KV_HEADS


def _experts(old, ctx):
    # 0/1/None mean "dense" for several configs: keep them.
    if not isinstance(old, int) or isinstance(old, bool) or old <= EXPERTS:
        return old
    return EXPERTS


def _groups(old, ctx):
    if not isinstance(old, int) or isinstance(old, bool) or old <= 1:
        return old
    return 2


def _topk_groups(old, ctx):
    if not isinstance(old, int) or isinstance(old, bool) or old <= 1:
        return old
    return 1


def _positive_to(value):
    def rule(old, ctx):
        if not isinstance(old, int) or isinstance(old, bool) or old <= 0:
            return old
        return value

    return rule


def _window(old, ctx):
    if not isinstance(old, int) or isinstance(old, bool) or old <= 0:
        return old
    return SLIDING_WINDOW


def _positions(old, ctx):
    if not isinstance(old, int) or isinstance(old, bool) or old <= 0:
        return old
    return MAX_POSITIONS


# attribute name -> rule(old_value, context) -> new value. Applied at every config level.
SIZE_RULES: dict[str, Any] = {}
for _name in ("hidden_size", "d_model", "n_embd", "emb_dim", "word_embed_proj_dim", "embedding_size",
              "out_hidden_size", "projection_hidden_size", "projector_hidden_size", "projector_input_dim",
              "projector_output_dim", "vision_output_dim", "text_hidden_size", "hidden_size_global",
              "backbone_hidden_size", "lru_width", "embedding_dim",
              "input_embedding_size", "output_embedding_size", "router_hidden_size", "adapter_in_dim",
              "adapter_out_dim", "adapter_input_size"):
    SIZE_RULES[_name] = _positive_to(HIDDEN)
for _name in ("intermediate_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "n_inner", "dff",
              "ffn_hidden_size", "d_inner", "intermediate_size_mlp", "dense_intermediate_size",
              "feed_forward_size", "mlp_dim", "dim_ff", "encoder_intermediate_size", "mlp_only_intermediate_size"):
    SIZE_RULES[_name] = _positive_to(INTERMEDIATE)
for _name in ("moe_intermediate_size", "expert_ffn_hidden_size", "shared_expert_intermediate_size",
              "shared_intermediate_size", "shared_experts_intermediate_size",
              "moe_shared_expert_intermediate_size", "expert_intermediate_size"):
    SIZE_RULES[_name] = _positive_to(MOE_INTERMEDIATE)
for _name in ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers",
              "num_decoder_layers", "num_encoder_layers", "depth", "num_global_layers"):
    SIZE_RULES[_name] = _positive_to(LAYERS)
for _name in ("num_attention_heads", "n_head", "n_heads", "decoder_attention_heads", "encoder_attention_heads",
              "attention_heads", "num_decoder_attention_heads", "num_encoder_attention_heads", "num_heads",
              "swa_num_attention_heads", "index_n_heads", "conf_num_attention_heads", "linear_num_heads",
              "linear_num_value_heads"):
    SIZE_RULES[_name] = _positive_to(HEADS)
for _name in ("num_key_value_heads", "kv_n_heads", "num_kv_heads", "swa_num_key_value_heads",
              "num_query_groups"):
    SIZE_RULES[_name] = _kv_heads
SIZE_RULES["linear_num_key_heads"] = _positive_to(KV_HEADS)
for _name in ("head_dim", "attention_head_dim", "attention_head_size", "d_head", "kv_channels", "swa_head_dim",
              "dim_head", "index_head_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_head_dim",
              "mamba_d_head", "mamba_head_dim", "mamba_headdim", "global_head_dim"):
    SIZE_RULES[_name] = _positive_to(HEAD_DIM)
# Multi-head latent attention (DeepSeek-V2/V3 family): q/kv low-rank + split rope/nope head dims.
SIZE_RULES.update({
    "q_lora_rank": _positive_to(32),
    "kv_lora_rank": _positive_to(32),
    "o_lora_rank": _positive_to(32),
    "qk_rope_head_dim": _positive_to(8),
    "qk_nope_head_dim": _positive_to(16),
    "v_head_dim": _positive_to(16),
    "qk_head_dim": _positive_to(24),
})
for _name in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"):
    SIZE_RULES[_name] = _experts
for _name in ("num_experts_per_tok", "moe_topk", "moe_top_k", "moe_k", "num_experts_per_token", "top_k"):
    SIZE_RULES[_name] = _cap(EXPERTS_PER_TOKEN)
for _name in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"):
    SIZE_RULES[_name] = _cap(1)
for _name in ("n_group", "num_expert_group"):
    SIZE_RULES[_name] = _groups
SIZE_RULES["topk_group"] = _topk_groups
for _name in ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_target_positions",
              "context_length", "model_max_length"):
    SIZE_RULES[_name] = _positions
for _name in ("sliding_window", "window_size", "attention_window_size", "sliding_window_size",
              "attention_chunk_size", "local_attention_window_len"):
    SIZE_RULES[_name] = _window
SIZE_RULES.update({
    # State-space / linear-attention blocks.
    "mamba_d_state": _positive_to(16),
    "state_size": _positive_to(16),
    "ssm_state_size": _positive_to(16),
    "mamba_n_heads": _positive_to(8),
    "mamba_num_heads": _positive_to(8),
    "n_mamba_heads": _positive_to(2),
    "mamba_n_groups": _cap(1),
    "mamba_ngroups": _cap(1),
    "n_groups": _cap(1),
    "time_step_rank": lambda old, ctx: 8 if isinstance(old, int) and not isinstance(old, bool) else old,
    "mamba_dt_rank": lambda old, ctx: 8 if isinstance(old, int) and not isinstance(old, bool) else old,
    # Layer-pattern integers: make a 2-layer model contain both kinds of layer.
    "first_k_dense_replace": _cap(1),
    "num_dense_layers": _cap(1),
    "decoder_sparse_step": _cap(1),
    "sliding_window_pattern": _cap(2),
    "_sliding_window_pattern": _cap(2),
    "global_attn_every_n_layers": _cap(2),
    "no_rope_layer_interval": _cap(2),
    "attn_layer_period": _cap(2),
    "attn_layer_offset": _cap(1),
    "expert_layer_period": _cap(2),
    "expert_layer_offset": _cap(0),
    "moe_layer_start_index": _cap(0),
    "moe_layer_interval": _cap(1),
    "num_nextn_predict_layers": _cap(1),
    "num_mtp_layers": _cap(1),
    "num_kv_shared_layers": _cap(0),
    "laurel_rank": _positive_to(8),
    "zero_expert_num": _cap(2),
    "mamba_d_ssm": _positive_to(2 * HIDDEN),
    "encoder_hash_byte_group_vocab": _positive_to(1024),
    "rotary_dim": _positive_to(8),
    "hidden_size_per_layer_input": _positive_to(16),
    "vocab_size_per_layer_input": _positive_to(tok.VOCAB_SIZE),
    # Vision/audio towers are only built, never fed: keep them small.
    "mm_tokens_per_image": _cap(16),
    "projector_patch_dim": _positive_to(HIDDEN),
})

# Attributes that are lists of layer indices (they shrink with the layers they point at).
LAYER_INDEX_LISTS = ("full_attn_idxs", "hybrid_layer_ids", "mlp_only_layers", "moe_layers",
                     "cross_attention_layers", "ple_layer_ids", "attn_layer_indices", "global_attn_indexes",
                     "intermediate_layers_indices")
# A list attribute is a per-layer pattern only if its name says so (and its length is the layer count).
PER_LAYER_NAME = re.compile(r"layer|block|type|pattern")
# Names whose value is the number of layers of that config level (first found wins).
LAYER_COUNT_NAMES = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "depth")
# Per-layer lists that are not layer patterns even when their length matches (they are rare).
NOT_PER_LAYER = frozenset({"architectures", "mrope_section", "spatial_merge_size", "per_layer_config"})

# Per model_type overrides, applied after the generic shrink at the config level with that model_type
# (nested configs included; a dict value for a nested config's name is merged into it). Each entry
# says why the generic rules are not enough.
OVERRIDES: dict[str, dict[str, Any]] = {
    # Default configs without any attention layer (released checkpoints are hybrid): make them hybrid.
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "lfm2": {"full_attn_idxs": [1]},  # released LFM2s mix short-conv and attention layers
    # Defaults leave the layer pattern / expert counts unset (None) for the checkpoint to fill.
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "dots1": {"n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN, "n_shared_experts": 1,
              "first_k_dense_replace": 1},
    "hunyuan_v1_moe": {"num_experts": EXPERTS, "moe_topk": EXPERTS_PER_TOKEN},
    "deepseek_v2": {"num_experts_per_tok": EXPERTS_PER_TOKEN, "first_k_dense_replace": 1},
    "qwen4_exp_text": {"indexer_n_heads": HEADS, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM,
                       "indexer_budget": 16, "indexer_compress_ratio": 4},
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {t: {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}
                            for t in ("sliding_attention", "full_attention")},
    },
    # DeepSeek V4's heavily compressed layers pool windows of 128 tokens, longer than every tiny input:
    # they would compress (and train) nothing. An 8-token window is covered by the inputs of every level.
    "deepseek_v4": {"compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}},
    # SSM heads: num_heads * head_dim must equal expand * hidden_size (2 * 64).
    "mamba2": {"num_heads": 8},
    # Mamba's default init (std 0.1) keeps the mixers' outputs and states near zero: the tiny model then
    # greedily repeats one token whatever its state holds, so a wrong recurrent state goes unseen.
    "mamba": {"initializer_range": 0.5},
    "falcon_mamba": {"initializer_range": 0.5},
    # Compressed pattern [[kinds, repeats]]: one global + one local layer.
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # The shared transformer block is tied across hybrid layers: it needs at least two of them.
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # Sliding layers use head_dim = per-layer qk_nope (scaled to 24) + qk_rope (8).
    "dots3_note_text": {"head_dim": 32},
    # Reformer's axial position shapes multiply to the positions and their dims add up to the hidden size.
    "reformer": {"axial_pos_shape": [32, 64], "axial_pos_embds_dim": [32, 32]},
    # DbrxAttention reads attn_config.rope_theta, which only checkpoints' configs carry.
    "dbrx": {"attn_config": {"rope_theta": 500000.0, "clip_qkv": 8.0}},
    # mLSTM rounds qk_dim up to a multiple of 64: keep qk and v head dims equal at hidden 64.
    "xlstm": {"num_heads": HEADS, "qk_dim_factor": 1.0},
    # Audio-token decoders read (batch * codebooks, seq) ids: one codebook makes text-shaped ids valid.
    # Their generate starts every codebook from decoder_start_token_id, which released generation configs
    # set to the bos (and pad) token, one past the codebook entries (2048 for facebook/musicgen-small).
    "musicgen_decoder": {"num_codebooks": 1, "decoder_start_token_id": tok.BOS_TOKEN_ID},
    "musicgen_melody_decoder": {"num_codebooks": 1, "decoder_start_token_id": tok.BOS_TOKEN_ID},
    # X-MOD picks a language adapter; without a default language it refuses to run.
    "xmod": {"default_language": "en_XX"},
    # Kolibri 1.1 scores keys with the query heads of key head 0 (index_num_heads, all 12 of them in the
    # release), which the generic head count leaves at 2. Its per-layer key/value sources are layer indices
    # (not kinds): give the release's kinds in 4 layers, a dense-MLP sliding layer, an indexer whose keys
    # and values a later indexed layer reuses, a mixture-of-experts sliding layer and that reindexer.
    "kolibri1_1": {"num_hidden_layers": 4, "index_num_heads": HEADS // KV_HEADS,
                   "layer_types": ["sliding_attention", "indexed_attention", "sliding_attention", "indexed_attention"],
                   "index_layers": [1], "kv_source_layers": [0, 1, 2, 1], "mlp_only_layers": [0]},
    # Dory's to_dict() doubles its layer counts (released configs list attention and mlp as separate
    # blocks), which the generic shrink cannot cut in step: give the internal (halved) form, with an
    # input, a recurrent and an output section, the recurrent one holding both attention kinds.
    "dory": {"num_hidden_layers": 4, "n_input_layers": 1, "n_recurrent_layers": 2, "n_output_layers": 1,
             "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "full_attention"]},
}


def _token_id_keys(d: dict) -> list[str]:
    return [k for k in d if (k.endswith("_token_id") or k.endswith("_token_ids") or k.endswith("_token_index")
                             or k.endswith("_token_indices")) and k not in ("pad_token_id", "bos_token_id",
                                                                            "eos_token_id")]


def known_model_types() -> list[str]:
    """Every type the factory accepts: the causal-LM mapping plus the multimodal text-only ones."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(MULTIMODAL_TEXT_ONLY))


def check_model_type(model_type: str) -> None:
    """Raise :class:`TinyModelError` with a useful message unless `model_type` is buildable."""
    from transformers import CONFIG_MAPPING

    if model_type in REMOTE_CODE_ONLY:
        raise TinyModelError(f"model_type {model_type!r} is not in transformers: {REMOTE_CODE_ONLY[model_type]}")
    if model_type in DRAFT_ONLY:
        raise TinyModelError(
            f"model_type {model_type!r} is a speculative-decoding draft model that reads its target's kv cache; "
            f"it has no standalone forward. Build the target instead: {DRAFT_ONLY[model_type]!r}."
        )
    known = known_model_types()
    if model_type in known:
        return
    if model_type in CONFIG_MAPPING:
        raise TinyModelError(
            f"model_type {model_type!r} exists in transformers but has no causal-LM class "
            f"(not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES); the tiny-model factory builds causal LMs only."
        )
    close = difflib.get_close_matches(model_type, known, n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise TinyModelError(
        f"unknown model_type {model_type!r}.{hint} Use a Transformers model_type such as llama, qwen3, "
        f"mistral, gemma2 or gpt2 (`hf-neuron tiny-model --list` prints all {len(known)})."
    )


def _layer_count_name(d: dict) -> str | None:
    for name in LAYER_COUNT_NAMES:
        if isinstance(d.get(name), int) and not isinstance(d.get(name), bool) and d[name] > 0:
            return name
    return None


def _layer_signatures(d: dict, n_layers: int) -> tuple[dict, dict, list[tuple]]:
    """``(per-layer lists, layer index lists, each layer's kind)`` of a config dict with ``n_layers``."""
    per_layer = {k: v for k, v in d.items()
                 if k not in NOT_PER_LAYER and k not in LAYER_INDEX_LISTS and PER_LAYER_NAME.search(k)
                 and isinstance(v, (list, str)) and len(v) == n_layers and n_layers > 1
                 and all(not isinstance(x, (dict, list)) for x in v)}
    # A per-layer string is a pattern such as nemotron-h's hybrid_override_pattern "M-M*-", never a name.
    per_layer = {k: v for k, v in per_layer.items() if not isinstance(v, str) or "pattern" in k}
    index_lists = {k: v for k, v in d.items() if k in LAYER_INDEX_LISTS and isinstance(v, list)
                   and all(isinstance(i, int) and not isinstance(i, bool) for i in v)}
    per_layer_config = {int(k): v for k, v in (d.get("per_layer_config") or {}).items()}
    signatures = []
    for i in range(n_layers):
        sig = tuple(_hashable(v[i]) for v in per_layer.values()) + (_hashable(per_layer_config.get(i)),)
        sig += tuple((i in v) or (i - n_layers in v) for v in index_lists.values())
        signatures.append(sig)
    return per_layer, index_lists, signatures


def _select_layers(d: dict, n_layers: int, target: int | None = None) -> tuple[list[int], dict[str, Any]]:
    """Pick the fewest layer indices that cover every distinct layer kind of the original pattern.

    Returns the indices and the rewritten per-layer attributes (lists, strings, index lists).
    """
    per_layer, index_lists, signatures = _layer_signatures(d, n_layers)
    chosen: list[int] = []
    seen = set()
    for i, sig in enumerate(signatures):
        if sig not in seen:
            seen.add(sig)
            chosen.append(i)
    if target and target > n_layers:
        chosen = [i % n_layers for i in range(target)]  # more layers than the original: repeat its pattern
    else:
        chosen = chosen[:target or MAX_LAYERS]
        target = min(target or LAYERS, n_layers)
        i = 0
        while len(chosen) < target:
            if i not in chosen:
                chosen.append(i)
            i += 1
        chosen.sort()
    rewritten: dict[str, Any] = {}
    for k, v in per_layer.items():
        picked = [v[i] for i in chosen]
        rewritten[k] = "".join(picked) if isinstance(v, str) else picked
    for k, v in index_lists.items():
        members = {j % n_layers for j in v}
        rewritten[k] = [new for new, old in enumerate(chosen) if old in members]
    return chosen, rewritten


def layer_count(config) -> int | None:
    """The number of layers of ``config``'s own level (None when it names none)."""
    d = config.to_dict()
    name = _layer_count_name(d)
    return d[name] if name else None


def with_layer_count(config, count: int):
    """``config`` with ``count`` layers when all its layers are of one kind (each per-layer value the same
    for every layer; no period, offset or dense prefix), else None: two depths of such a model differ
    only by whole layers, so ``hf-neuron check`` extrapolates a training step's activations from them."""
    d = config.to_dict()
    name = _layer_count_name(d)
    if (name is None or d.get("per_layer_config") or "first_k_dense_replace" in d
            or any(key.endswith("_layer_offset") for key in d) or len(set(_layer_signatures(d, d[name])[2])) > 1):
        return None
    resized = copy.deepcopy(config)
    setattr(resized, name, count)
    for key, value in _select_layers(d, d[name], count)[1].items():  # a per-layer list of one value, resized
        setattr(resized, key, value)
    return resized


def _fewest_periodic_layers(d: dict, n_layers: int) -> tuple[int, dict[str, int]] | None:
    """For a config whose layer kinds repeat by period (Jamba: an attention layer every
    ``attn_layer_period`` layers from ``attn_layer_offset``, an expert layer every ``expert_layer_period``
    from ``expert_layer_offset``): ``(fewest layers, new offsets)`` whose layers have exactly the kinds of
    the full model, the periods kept. None when the config has no such pair or no shorter stack has them.

    Without the new offsets, keeping every kind means keeping every layer up to the largest offset (five
    of Jamba's 32 layers, four of them Mamba layers whose scan is the slow part of tracing; three do)."""
    pairs = [(key, key.replace("_offset", "_period")) for key in d if key.endswith("_layer_offset")]
    pairs = [(offset, period) for offset, period in pairs
             if all(isinstance(d.get(k), int) and not isinstance(d.get(k), bool) for k in (offset, period))
             and d[period] > 0]
    if not pairs:
        return None

    def kinds(count: int, offsets: tuple[int, ...]) -> set[tuple[bool, ...]]:
        return {tuple(i % d[period] == offset for offset, (_, period) in zip(offsets, pairs)) for i in range(count)}

    wanted = kinds(n_layers, tuple(d[offset] for offset, _ in pairs))
    for count in range(len(wanted), n_layers):
        ranges = [range(min(d[period], count)) for _, period in pairs]
        for offsets in itertools.product(*ranges):
            if kinds(count, offsets) == wanted:
                return count, {offset: value for (offset, _), value in zip(pairs, offsets)}
    return None


def fewer_layers(config):
    """``(config with the fewest layers that keep every distinct kind of layer, layers kept)`` at full
    width, or ``(config, its layer count)`` when it cannot be cut (a nested text config, a per-layer
    dict). Layers of the same kind have the same activations, so ``hf-neuron check`` traces this one.

    A dense prefix before the first mixture-of-experts layer (``first_k_dense_replace``) is kept whole,
    so that one expert layer is traced too.
    """
    d = config.to_dict()
    name = _layer_count_name(d)
    if name is None or d.get("per_layer_config"):
        return config, None
    n_layers = d[name]
    # Kinds set by period and offset alone (no per-layer list or dense prefix besides): fewer layers with
    # new offsets.
    periodic = None if "first_k_dense_replace" in d or _select_layers(d, n_layers)[1] else (
        _fewest_periodic_layers(d, n_layers))
    if periodic is not None:
        count, offsets = periodic
        reduced = copy.deepcopy(config)
        setattr(reduced, name, count)
        for key, value in offsets.items():
            setattr(reduced, key, value)
        return reduced, count
    # Layer kinds a config derives from an offset (Jamba's attention layer at attn_layer_offset, every
    # attn_layer_period) or a dense prefix: the first layer of that kind is kept.
    firsts = [v for k, v in d.items() if k.endswith("_layer_offset") and isinstance(v, int) and not isinstance(v, bool)]
    if isinstance(d.get("first_k_dense_replace"), int):
        firsts.append(d["first_k_dense_replace"])
    target = min(n_layers, max(firsts) + 1) if firsts and max(firsts) > 0 else None
    chosen, rewritten = _select_layers(d, n_layers, target)
    if len(chosen) >= n_layers:
        return config, n_layers
    reduced = copy.deepcopy(config)
    setattr(reduced, name, len(chosen))
    for key, value in rewritten.items():
        setattr(reduced, key, value)
    kinds = getattr(config, "layer_types", None)
    if kinds is not None and set(getattr(reduced, "layer_types", None) or ()) != set(kinds):
        return config, n_layers  # a pattern the names do not show: keep every layer
    return reduced, len(chosen)


def _shrink_per_layer_config(d: dict, sized: dict, chosen: list[int]) -> dict:
    """Heterogeneous per-layer overrides for the kept layers, sizes scaled like the global ones.

    A layer with twice the global head dim keeps twice the (tiny) global head dim, so the tiny model
    stays heterogeneous in the same way.
    """
    old = {int(k): v for k, v in d["per_layer_config"].items()}
    out = {}
    for new_idx, old_idx in enumerate(chosen):
        overrides = old.get(old_idx)
        if not overrides:
            continue
        scaled = {}
        for key, value in overrides.items():
            base, tiny = d.get(key), sized.get(key)
            if (isinstance(value, int) and not isinstance(value, bool) and isinstance(base, int) and base > 0
                    and isinstance(tiny, int)):
                value = max(1, round(tiny * value / base))
            elif key in SIZE_RULES and isinstance(value, int) and not isinstance(value, bool):
                value = SIZE_RULES[key](value, {})
            scaled[key] = value
        out[str(new_idx)] = scaled
    return out


def _hashable(value):
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _shrink_rope(rope: Any, head_dim: int | None) -> Any:
    """Keep RoPE parameters consistent with a smaller head dim (mrope sections, longrope factors)."""
    if not isinstance(rope, dict):
        return rope
    rope = copy.deepcopy(rope)
    # Per-layer-type rope dicts (gemma3: {"full_attention": {...}, "sliding_attention": {...}}).
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return {k: _shrink_rope(v, head_dim) for k, v in rope.items()}
    if head_dim:
        partial = rope.get("partial_rotary_factor") or 1.0
        half = max(1, int(head_dim * partial) // 2)
        section = rope.get("mrope_section")
        if isinstance(section, list) and section and sum(section) != half:
            total = sum(section)
            new = [max(1, math.floor(s * half / total)) for s in section]
            while sum(new) > half:
                new[new.index(max(new))] -= 1
            while sum(new) < half:
                new[0] += 1
            rope["mrope_section"] = new
        for key in ("short_factor", "long_factor"):
            factors = rope.get(key)
            if isinstance(factors, list) and factors and len(factors) != half:
                rope[key] = [factors[min(i, len(factors) - 1)] for i in range(half)]
    return rope


def _shrink_level(config_cls, defaults, vocab_size: int, overrides: dict, nested: bool = False) -> Any:
    """Build a tiny instance of `config_cls` from its default instance `defaults`."""
    from transformers import PretrainedConfig

    d = defaults.to_dict()
    derived = _derived_keys(config_cls, d)
    sized: dict[str, Any] = {}  # generic size rules (skipped for derived attributes)
    fixed: dict[str, Any] = {}  # always passed
    ctx = {"heads": next((d[k] for k in ("num_attention_heads", "n_head", "n_heads", "attention_heads")
                          if isinstance(d.get(k), int)), None)}
    per_layer_sizes: set[str] = set()
    for key, value in d.items():
        rule = SIZE_RULES.get(key)
        if rule is None:
            continue
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            new = [rule(v, ctx) for v in value]  # per-layer sizes (gemma3n's intermediate_size)
            per_layer_sizes.add(key)
        else:
            new = rule(value, ctx)
        if new != value:
            sized[key] = new

    # Equalities of the original that the generic rules would break, and unset sizes models read as is.
    if "qk_rope_head_dim" in d:
        if d.get("head_dim") is not None and d.get("head_dim") == d.get("qk_rope_head_dim"):
            sized["head_dim"] = sized.get("qk_rope_head_dim", d["qk_rope_head_dim"])
    elif "head_dim" in d and d["head_dim"] is None and "head_dim" not in derived:
        hidden = sized.get("hidden_size", d.get("hidden_size"))
        heads = sized.get("num_attention_heads", d.get("num_attention_heads"))
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            sized["head_dim"] = hidden // heads
    if "num_key_value_heads" in d and d["num_key_value_heads"] is None and "num_key_value_heads" not in derived:
        sized["num_key_value_heads"] = KV_HEADS

    # Nested configs (text_config, vision_config, audio_config, ...): shrink each recursively.
    for key in d:
        sub = vars(defaults).get(key)
        if isinstance(sub, PretrainedConfig):
            sub_over = dict(OVERRIDES.get(getattr(sub, "model_type", ""), {}))
            if isinstance(overrides.get(key), dict):
                sub_over.update(overrides[key])
            fixed[key] = _shrink_level(type(sub), sub, vocab_size, sub_over, nested=True).to_dict()

    if isinstance(d.get("vocab_size"), int) and d["vocab_size"] > 0:
        fixed["vocab_size"] = vocab_size
        # A head narrower than the (padded) embedding table (Inkling2's unpadded_vocab_size) stays within it:
        # loading unpads the checkpoint's head rows to it.
        if isinstance(d.get("unpadded_vocab_size"), int) and d["unpadded_vocab_size"] > vocab_size:
            fixed["unpadded_vocab_size"] = vocab_size
    # The factory builds causal LMs: a config that says whether its model is a decoder (the BERT family,
    # Reformer) must say so, or the LM head runs a bidirectional encoder that upstream warns about and
    # that keeps no cache ("add `is_decoder=True`"), as a user generating with it sets.
    if not nested and d.get("is_decoder") is False:
        fixed["is_decoder"] = True
    # Special token ids point into the tiny vocabulary.
    for key, value in (("pad_token_id", tok.PAD_TOKEN_ID), ("bos_token_id", tok.BOS_TOKEN_ID),
                       ("eos_token_id", tok.EOS_TOKEN_ID)):
        if key in d:
            fixed[key] = value
    reserved = iter(tok.RESERVED_TOKEN_IDS)
    for key in _token_id_keys(d):
        value = d[key]
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab_size:
            fixed[key] = next(reserved, tok.RESERVED_TOKEN_IDS[-1])
        elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab_size for v in value):
            fixed[key] = [next(reserved, tok.RESERVED_TOKEN_IDS[-1]) if v >= vocab_size else v for v in value]

    # Per-layer patterns: keep every distinct kind of layer.
    layer_lists: dict[str, Any] = {}
    count_name = _layer_count_name(d)
    if count_name is not None and sized.get(count_name, d[count_name]) != d[count_name]:
        wanted = overrides.get(count_name)
        chosen, layer_lists = _select_layers(d, d[count_name], wanted if isinstance(wanted, int) else None)
        sized[count_name] = len(chosen)
        fixed[count_name] = len(chosen)
        for key in per_layer_sizes:
            if key in sized and len(sized[key]) == d[count_name]:
                sized[key] = [sized[key][i] for i in chosen]
        if d.get("per_layer_config"):
            fixed["per_layer_config"] = _shrink_per_layer_config(d, sized, chosen)

    head_dim = sized.get("head_dim", d.get("head_dim"))
    if "head_dim" in derived or head_dim is None:
        hidden = sized.get("hidden_size", d.get("hidden_size"))
        heads = sized.get("num_attention_heads", d.get("num_attention_heads"))
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            head_dim = hidden // heads
    if d.get("rope_parameters"):
        rope = _shrink_rope(d["rope_parameters"], head_dim)
        if rope != d["rope_parameters"]:
            fixed["rope_parameters"] = rope

    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(vars(defaults).get(key), PretrainedConfig):
            continue  # applied to the nested config above
        fixed[key] = value

    kwargs = {k: v for k, v in sized.items() if k not in derived}
    kwargs.update(fixed)
    # Patterns the config derives from other attributes (None field defaults: layer_types from
    # sliding_window_pattern...) are left to it first, so user overrides of those attributes still apply.
    derivable = derived | {k for k, v in _field_defaults(config_cls).items() if v is None}
    explicit_lists = {k: v for k, v in layer_lists.items() if k not in derivable and k not in fixed}
    derived_lists = {k: v for k, v in layer_lists.items() if k not in kwargs and k not in explicit_lists}
    # A nested config instance may differ from its class defaults (mistral3's text config has no sliding
    # window): start from the instance's own values.
    start = _customized_values(config_cls, d) if nested else {}
    try:
        config = config_cls(**{**start, **kwargs, **explicit_lists})
    except Exception:
        if not derived_lists:
            raise
        # The config derived a pattern of the wrong length (hard-coded prefixes...): give it explicitly.
        return config_cls(**{**start, **kwargs, **explicit_lists, **derived_lists})
    # Lists the config derives itself (layer_types from a pattern...) must still cover every kind.
    if any(not _covers(vars(config).get(k), v, k) for k, v in derived_lists.items()):
        config = config_cls(**{**start, **kwargs, **explicit_lists, **derived_lists})
    return config


def _covers(actual, wanted, key: str) -> bool:
    if key in LAYER_INDEX_LISTS:
        return isinstance(actual, list) and bool(actual) == bool(wanted)
    if not isinstance(actual, (list, str)) or len(actual) != len(wanted):
        return False
    return {_hashable(v) for v in actual} >= {_hashable(v) for v in wanted}


def _field_defaults(config_cls) -> dict[str, Any]:
    import dataclasses

    if not dataclasses.is_dataclass(config_cls):
        return {}
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
        else:
            out[f.name] = None
    return out


def _customized_values(config_cls, d: dict) -> dict:
    """Values of a nested config instance that differ from a fresh instance of its class."""
    try:
        fresh = config_cls().to_dict()
    except Exception:
        return {}
    fields = _field_defaults(config_cls)
    aliases = set(getattr(config_cls, "attribute_map", {}).values())
    skip = {"transformers_version", "architectures", "_name_or_path", "model_type", "id2label", "label2id"}
    return {k: copy.deepcopy(v) for k, v in d.items()
            if (k in fields or k in aliases) and k not in skip and k in fresh and fresh[k] != v}


def _derived_keys(config_cls, defaults: dict) -> set[str]:
    """Attributes ``__post_init__`` computes from others (not a field, nor the target of an alias).

    Sizes of those are left for the config to re-derive from the tiny values (deepseek's head_dim is
    its qk_rope_head_dim, qk_head_dim = nope + rope...).
    """
    fields = _field_defaults(config_cls)
    if not fields:
        return set()
    aliases = set(getattr(config_cls, "attribute_map", {}).values())
    return {key for key in defaults if key not in fields and key not in aliases}


def default_config(model_type: str):
    """The config class's defaults for `model_type` (the released model's shape; no weights)."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]()


def tiny_config(model_type: str, *, seed: int = 0, vocab_size: int | None = None, **overrides):
    """A tiny :class:`~transformers.PretrainedConfig` for `model_type` (hidden 64, 2+ layers, 4 heads).

    `seed` is accepted for symmetry with the model builders (weights depend on it, the config does
    not). `vocab_size` defaults to the tiny tokenizer's (512). Keyword `overrides` win over everything
    (a nested config takes a dict: ``text_config={"num_hidden_layers": 4}``); overriding the layer count
    keeps every kind of layer as far as the count allows.
    """
    check_model_type(model_type)
    model_type = built_type(model_type)
    vocab_size = vocab_size or tok.VOCAB_SIZE
    table = dict(OVERRIDES.get(model_type, {}))
    for key, value in overrides.items():
        # Nested config overrides merge with the table's (dbrx's attn_config keeps its rope_theta).
        if key.endswith("_config") and isinstance(value, dict) and isinstance(table.get(key), dict):
            value = {**table[key], **value}
        table[key] = value
    try:
        defaults = default_config(model_type)
        config = _shrink_level(type(defaults), defaults, vocab_size, table)
    except TinyModelError:
        raise
    except Exception as exc:
        raise TinyModelError(f"could not build a tiny config for {model_type!r}: {type(exc).__name__}: {exc}") from exc
    return config
