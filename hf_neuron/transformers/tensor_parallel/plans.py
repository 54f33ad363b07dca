"""Tensor-parallel plans for top-100 architectures that Transformers ships without one.

Each plan is in Transformers' own format, a ``base_model_tp_plan`` (module globs relative to the base
model -> style names), installed on the configuration class by the fix ``transformers.tp_plan.<model_type>``
only while upstream's is empty: an upstream plan always wins, and so does a ``tp_plan`` the user passes.
The rules are upstream's: attention query/key/value projections colwise (each rank keeps whole
heads), the output projection rowwise (one all-reduce); MLP up (and gate) colwise, down rowwise.
Embeddings, norms and the LM head stay replicated.

What a plan dict cannot say is next to it:

- ``local_sizes``: module attributes that hold a full width or head count and that the forward uses
  to reshape (``self.num_heads`` in ``view(b, s, self.num_heads, d)``). After sharding they become
  the rank's share (divided by the TP degree), as upstream's newer models infer them with ``-1``.
- styles named ``hf_neuron.*``: see :mod:`hf_neuron.transformers.tensor_parallel.styles`.
- ``applies``: a configuration check for the variants the plan covers, with the reason otherwise.

An embedding tied to the LM head is named ``"replicate"``: Transformers would otherwise shard
``embed_tokens`` over the vocabulary, and the tied (unplanned) LM head would then mix a sharded
weight with replicated activations.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

CONFIG_PACKAGE = "transformers.models"


@dataclasses.dataclass(frozen=True)
class TextPlan:
    model_type: str
    config_class: str
    plan: dict
    local_sizes: dict = dataclasses.field(default_factory=dict)
    applies: Callable | None = None  # config -> None (covered) or the reason it is not
    # Multi-query attention: the single key/value head stays whole on every rank (only queries split).
    kv_replicated: bool = False
    # Key/value projections of the plan that stay whole when the key/value heads do not split over the
    # ranks (a multi-query checkpoint of a grouped-query architecture), and the attributes that then
    # become the rank's share (the query heads per key/value head).
    kv_projections: tuple = ()
    kv_whole_sizes: dict = dataclasses.field(default_factory=dict)

    @property
    def config_module(self) -> str:
        return f"{CONFIG_PACKAGE}.{self.model_type}.configuration_{self.model_type}"


PLANS: dict[str, TextPlan] = {}


def _register(model_type: str, config_class: str, plan: dict, local_sizes: dict | None = None, applies=None,
              kv_replicated: bool = False, kv_projections: tuple = (), kv_whole_sizes: dict | None = None) -> None:
    PLANS[model_type] = TextPlan(model_type, config_class, dict(plan), dict(local_sizes or {}), applies, kv_replicated,
                                 tuple(kv_projections), dict(kv_whole_sizes or {}))


def _attention(prefix: str, qkv=("q_proj", "k_proj", "v_proj"), out="out_proj") -> dict:
    return {**{f"{prefix}.{name}": "colwise" for name in qkv}, f"{prefix}.{out}": "rowwise"}


def _mlp(prefix: str, up=("fc_in",), down="fc_out") -> dict:
    return {**{f"{prefix}.{name}": "colwise" for name in up}, f"{prefix}.{down}": "rowwise"}


# OPTModel holds an OPTDecoder, itself a PreTrainedModel that reads the same base-model plan and whose
# plan OPTModel merges under `decoder.`: the keys are relative to the decoder.
_register("opt", "OPTConfig",
          {"embed_tokens": "replicate", **_attention("layers.*.self_attn"), **_mlp("layers.*", up=("fc1",), down="fc2")},
          {"decoder.layers.*.self_attn": ("num_heads",)})

_register("gpt_neo", "GPTNeoConfig",
          {**_attention("h.*.attn.attention"), **_mlp("h.*.mlp", up=("c_fc",), down="c_proj")},
          {"h.*.attn.attention": ("num_heads",)})

_register("stablelm", "StableLmConfig",
          {**_attention("layers.*.self_attn", out="o_proj"),
           **_mlp("layers.*.mlp", up=("gate_proj", "up_proj"), down="down_proj")},
          {"layers.*.self_attn": ("num_heads", "num_key_value_heads")},
          applies=lambda c: "its per-head q/k LayerNorms (qk_layernorm=True) are one module per head" if getattr(
              c, "qk_layernorm", False) else None)

_register("bitnet", "BitNetConfig",
          {**_attention("layers.*.self_attn", out="o_proj"), "layers.*.self_attn.attn_sub_norm": "hf_neuron.sharded_rmsnorm",
           **_mlp("layers.*.mlp", up=("gate_proj", "up_proj"), down="down_proj"),
           "layers.*.mlp.ffn_sub_norm": "hf_neuron.sharded_rmsnorm"})

_register("gpt2", "GPT2Config",
          {"h.*.attn.c_attn": "hf_neuron.conv1d_packed3_colwise", "h.*.attn.c_proj": "hf_neuron.conv1d_rowwise",
           "h.*.mlp.c_fc": "hf_neuron.conv1d_colwise", "h.*.mlp.c_proj": "hf_neuron.conv1d_rowwise"},
          {"h.*.attn": ("split_size", "num_heads", "embed_dim")},
          applies=lambda c: "its cross-attention blocks (add_cross_attention=True) are not covered" if getattr(
              c, "add_cross_attention", False) else None)

_register("bloom", "BloomConfig",
          {"h.*.self_attention": "hf_neuron.alibi_heads_batch_major", "h.*.self_attention.query_key_value": "colwise",
           "h.*.self_attention.dense": "rowwise",
           **_mlp("h.*.mlp", up=("dense_h_to_4h",), down="dense_4h_to_h")},
          {"h.*.self_attention": ("num_heads",)},
          applies=lambda c: "its pretraining_tp slicing (slow_but_exact=True) reads the full width" if getattr(
              c, "slow_but_exact", False) and getattr(c, "pretraining_tp", 1) > 1 else None)

_register("mpt", "MptConfig",
          {"blocks.*.attn": "hf_neuron.alibi_heads_first", "blocks.*.attn.Wqkv": "hf_neuron.packed3_colwise",
           "blocks.*.attn.out_proj": "rowwise", **_mlp("blocks.*.ffn", up=("up_proj",), down="down_proj")},
          {"blocks.*.attn": ("n_heads",)})


def _multi_query_only(config) -> str | None:
    if getattr(config, "new_decoder_architecture", False) or not getattr(config, "multi_query", True):
        return "the plan covers multi-query attention (multi_query=True, new_decoder_architecture=False) only"
    return None


_register("gpt_bigcode", "GPTBigCodeConfig",
          {"h.*.attn.c_attn": "hf_neuron.query_colwise_kv_replicated", "h.*.attn.c_proj": "rowwise",
           **_mlp("h.*.mlp", up=("c_fc",), down="c_proj")},
          {"h.*.attn": ("num_heads", "embed_dim", "num_key_value_groups")}, applies=_multi_query_only, kv_replicated=True)

_register("falcon", "FalconConfig",
          {"h.*.self_attention.query_key_value": "hf_neuron.query_colwise_kv_replicated",
           "h.*.self_attention.dense": "rowwise", **_mlp("h.*.mlp", up=("dense_h_to_4h",), down="dense_4h_to_h")},
          # num_key_value_groups: the query heads per key/value head (Transformers 5.25), the rank's share too
          {"h.*.self_attention": ("num_heads", "num_key_value_groups")}, kv_replicated=True,
          applies=lambda c: _multi_query_only(c) or ("ALiBi Falcon (alibi=True) is not covered" if getattr(
              c, "alibi", False) else None))

# Zaya's attention runs a convolution over the concatenated queries and keys and builds its value
# heads from two projections (the first half of the heads from one, the rest from the other), so no
# colwise layout keeps whole heads on a rank; its MoE experts (the bulk of the weights) are sharded.
_register("zaya", "ZayaConfig",
          {"embed_tokens": "replicate", "layers.*.mlp.experts.gate_up_proj": "packed_colwise", "layers.*.mlp.experts.down_proj": "rowwise",
           "layers.*.mlp.experts": "moe_tp_experts"})

# Zamba2's shared attention blocks shard by heads; its MLP adds a LoRA adapter to the fused gate/up
# output, and upstream's plan globs cannot tell the adapter's A and B matrices apart (both are
# `adapter_list.*.*`), so the MLP and the Mamba mixers stay replicated.
_register("zamba2", "Zamba2Config",
          {"embed_tokens": "replicate", **_attention("layers.*.shared_transformer.self_attn", out="o_proj")},
          applies=lambda c: "its attention LoRA adapters (use_shared_attention_adapter=True) are not covered" if getattr(
              c, "use_shared_attention_adapter", False) else None)


# Mamba's mixer is per channel after `in_proj` (x and z halves) up to `x_proj`, which mixes the channels
# (rowwise, one all-reduce), then `dt_proj` returns to channels; `out_proj` is rowwise. Its cache
# states take their width from the tensors written, so each rank's are its channels.
_MAMBA = {"layers.*.mixer": "hf_neuron.mixer_local", "layers.*.mixer.in_proj": "hf_neuron.packed2_colwise",
          "layers.*.mixer.conv1d": "hf_neuron.shard0", "layers.*.mixer.x_proj": "rowwise",
          "layers.*.mixer.dt_proj": "hf_neuron.shard0", "layers.*.mixer.out_proj": "rowwise"}
_register("mamba", "MambaConfig", _MAMBA)
_register("falcon_mamba", "FalconMambaConfig", _MAMBA)

# Recurrent Gemma: its local-attention blocks shard by heads (its published checkpoints have one
# key/value head, which then stays whole) and every MLP shards; the RG-LRU recurrent blocks stay replicated.
_register("recurrent_gemma", "RecurrentGemmaConfig",
          {"embed_tokens": "replicate", **_attention("layers.*.temporal_block", out="o_proj"),
           **_mlp("layers.*.mlp_block", up=("gate_proj", "up_proj"), down="down_proj")},
          kv_projections=("layers.*.temporal_block.k_proj", "layers.*.temporal_block.v_proj"),
          kv_whole_sizes={"layers.*.temporal_block": ("num_key_value_groups",)})

# RWKV: time mixing (key/value/receptance colwise, output rowwise) and channel mixing (key colwise,
# value rowwise; its receptance gates the replicated output, so it stays whole).
_register("rwkv", "RwkvConfig",
          {"blocks.*.attention": "hf_neuron.rwkv_attention", **_attention("blocks.*.attention", qkv=(
              "key", "value", "receptance"), out="output"), **_mlp("blocks.*.feed_forward", up=("key",), down="value")})
