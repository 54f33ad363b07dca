"""Tensor-parallel plans for diffusers transformer classes that upstream ships without one.

Each builder returns a plan in diffusers' own ``_tp_plan`` format: ``{"blocks.*.attn.to_q": "colwise", ...}``
with ``"colwise"`` / ``"rowwise"`` / ``PackedColwiseParallel`` / ``PackedRowwiseParallel`` styles. The
rules every plan follows (the same ones upstream's Flux / Qwen-Image plans follow):

- Attention: q/k/v projections colwise (each rank keeps ``heads / tp`` whole heads), output
  projection rowwise (one all-reduce per attention). QK-norms over ``head_dim`` stay replicated.
- Feed-forward: up (and gate) projections colwise, down projection rowwise (one all-reduce).
  A fused gate+up projection whose output is ``chunk(2)``-ed is ``PackedColwiseParallel([1, 1])``.
- Everything outside the repeated blocks (embedders, AdaLN modulation, final layer) stays replicated:
  modulation vectors index the full hidden size.

A glob entry that does not exist on some elements of its ModuleList (SD3's last block has no
``to_add_out``; ``attn2`` exists only on SD3.5's dual-attention blocks) is skipped for those
elements — see ``hf_neuron.diffusers.tensor_parallel``.

Plans are installed only on classes whose upstream ``_tp_plan`` is None: an upstream plan always wins.
"""

from __future__ import annotations

from hf_neuron.diffusers.plan_registry import tp_plan


def _packed_col(*blocks: int):
    from diffusers.hooks.tensor_parallel import PackedColwiseParallel

    return PackedColwiseParallel(list(blocks))


def _packed_row(*blocks: int):
    """Packed rowwise; without ``blocks`` the sizes come from the plan's ``packed_blocks``."""
    from diffusers.hooks.tensor_parallel import PackedRowwiseParallel

    return PackedRowwiseParallel(list(blocks) if blocks else None)


def attention(prefix: str, qkv=("to_q", "to_k", "to_v"), out=("to_out.0",)) -> dict:
    plan = {f"{prefix}.{name}": "colwise" for name in qkv}
    plan.update({f"{prefix}.{name}": "rowwise" for name in out})
    return plan


def feed_forward(prefix: str, up=("net.0.proj",), down="net.2") -> dict:
    plan = {f"{prefix}.{name}": "colwise" for name in up}
    plan[f"{prefix}.{down}"] = "rowwise"
    return plan


# --------------------------------------------------------------------------------------------- SD3


@tp_plan("SD3Transformer2DModel", "transformer_sd3")
def _sd3() -> dict:
    # MMDiT joint blocks; the last block is context_pre_only (no to_add_out / ff_context), and
    # attn2 exists only on SD3.5's dual-attention layers.
    blocks = "transformer_blocks.*"
    return {
        **attention(f"{blocks}.attn", qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **attention(f"{blocks}.attn2"),
        **feed_forward(f"{blocks}.ff"),
        **feed_forward(f"{blocks}.ff_context"),
    }


# ------------------------------------------------------------------------------------- Wan family

def _wan_norms(*lists: str) -> tuple[str, ...]:
    # qk_norm="rms_norm_across_heads": RMSNorm(heads * head_dim) applied before the heads split.
    return tuple(
        f"{blocks}.{norm}"
        for blocks in lists
        for norm in ("attn1.norm_q", "attn1.norm_k", "attn2.norm_q", "attn2.norm_k", "attn2.norm_added_k")
    )


_WAN_NORMS = _wan_norms("blocks.*")


def _wan_blocks(blocks: str = "blocks.*") -> dict:
    return {
        **attention(f"{blocks}.attn1"),
        **attention(f"{blocks}.attn2", qkv=("to_q", "to_k", "to_v", "add_k_proj", "add_v_proj")),
        **feed_forward(f"{blocks}.ffn"),
    }


@tp_plan("WanTransformer3DModel", "transformer_wan", across_heads_norms=_WAN_NORMS)
def _wan() -> dict:
    return _wan_blocks()


# -------------------------------------------------------------------------------------- MiniMax H3


@tp_plan("MiniMaxH3Transformer3DModel", "transformer_minimax_h3")
def _minimax_h3() -> dict:
    # One packed sequence through self-attention blocks with a SwiGLU FFN (fused gate+up: packed [1, 1]).
    plan = {}
    for blocks in ("transformer_blocks.*", "token_refiner.refiner_blocks.*"):
        plan.update(attention(f"{blocks}.attn"))
        plan.update({f"{blocks}.ff.net.0.proj": _packed_col(1, 1), f"{blocks}.ff.net.2": "rowwise"})
    return plan


# ------------------------------------------------------------------------------------------- Flux3


@tp_plan("Flux3Transformer2DModel", "transformer_flux3")
def _flux3() -> dict:
    # Per-mode blocks (a ModuleDict of ModuleLists) and joint single blocks; every block runs attention
    # and a SwiGLU FFN in parallel (linear_in = fused gate+up), each with its own output projection.
    plan = {}
    for blocks in ("mode_blocks.image.*", "mode_blocks.image_cond.*", "txt_mode_blocks.*",
                   "single_transformer_blocks.*"):
        plan.update(attention(f"{blocks}.attn"))
        plan.update({f"{blocks}.ff.linear_in": _packed_col(1, 1), f"{blocks}.ff.linear_out": "rowwise"})
    return plan


# --------------------------------------------------------------------------------------- LTX / LTX2


@tp_plan(
    "LTXVideoTransformer3DModel", "transformer_ltx",
    across_heads_norms=tuple(f"transformer_blocks.*.{a}.{n}" for a in ("attn1", "attn2") for n in ("norm_q", "norm_k")),
    sharded_rotary={"rope": -1},
)
def _ltx() -> dict:
    return {
        **attention("transformer_blocks.*.attn1"),
        **attention("transformer_blocks.*.attn2"),
        **feed_forward("transformer_blocks.*.ff"),
    }


def _ltx2_rotary_dim(rope) -> int:
    return 1 if getattr(rope, "rope_type", "interleaved") == "split" else -1


_LTX2_ATTENTIONS = ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")


@tp_plan(
    "LTX2VideoTransformer3DModel", "transformer_ltx2",
    across_heads_norms=tuple(f"transformer_blocks.*.{a}.{n}" for a in _LTX2_ATTENTIONS for n in ("norm_q", "norm_k")),
    # interleaved (cos, sin): (B, S, heads * head_dim); split: (B, heads, S, head_dim // 2)
    sharded_rotary={
        name: _ltx2_rotary_dim for name in ("rope", "audio_rope", "cross_attn_rope", "cross_attn_audio_rope")
    },
)
def _ltx2() -> dict:
    # Video and audio streams plus the two cross-modal attentions. The optional per-head gate
    # (`to_gate_logits`, one logit per head) is sharded with the heads.
    plan = {}
    for name in _LTX2_ATTENTIONS:
        plan.update(attention(f"transformer_blocks.*.{name}", qkv=("to_q", "to_k", "to_v", "to_gate_logits")))
    plan.update(feed_forward("transformer_blocks.*.ff"))
    plan.update(feed_forward("transformer_blocks.*.audio_ff"))
    return plan


# ---------------------------------------------------------------------------------- HunyuanVideo


def _single_stream_widths(block) -> list[int]:
    """``proj_out`` of a single-stream block reads ``cat([attention output, MLP output])``."""
    attention_width = block.attn.to_q.out_features
    return [attention_width, block.proj_out.in_features - attention_width]


def _hunyuan_dual_and_single(refiner: str) -> dict:
    return {
        **attention("transformer_blocks.*.attn",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **feed_forward("transformer_blocks.*.ff"),
        **feed_forward("transformer_blocks.*.ff_context"),
        **attention("single_transformer_blocks.*.attn", out=()),
        "single_transformer_blocks.*.proj_mlp": "colwise",
        "single_transformer_blocks.*.proj_out": _packed_row(),
        **attention(f"{refiner}.attn"),
        **feed_forward(f"{refiner}.ff"),
    }


@tp_plan(
    "HunyuanVideoTransformer3DModel", "transformer_hunyuan_video",
    packed_blocks={"single_transformer_blocks.*.proj_out": _single_stream_widths},
)
def _hunyuan_video() -> dict:
    return _hunyuan_dual_and_single("context_embedder.token_refiner.refiner_blocks.*")


@tp_plan("HunyuanVideo15Transformer3DModel", "transformer_hunyuan_video15")
def _hunyuan_video15() -> dict:
    # Dual-stream blocks only (no single-stream blocks in 1.5), plus the text token refiner.
    return {
        **attention("transformer_blocks.*.attn",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **feed_forward("transformer_blocks.*.ff"),
        **feed_forward("transformer_blocks.*.ff_context"),
        **attention("context_embedder.token_refiner.refiner_blocks.*.attn"),
        **feed_forward("context_embedder.token_refiner.refiner_blocks.*.ff"),
    }


@tp_plan(
    "HunyuanImageTransformer2DModel", "transformer_hunyuanimage",
    packed_blocks={"single_transformer_blocks.*.proj_out": _single_stream_widths},
)
def _hunyuan_image() -> dict:
    return _hunyuan_dual_and_single("context_embedder.token_refiner.refiner_blocks.*")


# ------------------------------------------------------------------------------------------ Chroma


def _flux_like(mlp_up="colwise", ff=feed_forward) -> dict:
    """Flux layout: dual-stream (MMDiT) blocks and single-stream (parallel attention + MLP) blocks."""
    return {
        **attention("transformer_blocks.*.attn",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **ff("transformer_blocks.*.ff"),
        **ff("transformer_blocks.*.ff_context"),
        **attention("single_transformer_blocks.*.attn", out=()),
        "single_transformer_blocks.*.proj_mlp": mlp_up,
        "single_transformer_blocks.*.proj_out": _packed_row(),
    }


_SINGLE_STREAM = {"single_transformer_blocks.*.proj_out": _single_stream_widths}


@tp_plan("ChromaTransformer2DModel", "transformer_chroma", packed_blocks=_SINGLE_STREAM)
def _chroma() -> dict:
    # Modulation comes from the replicated approximator.
    return _flux_like()


@tp_plan("LongCatImageTransformer2DModel", "transformer_longcat_image", packed_blocks=_SINGLE_STREAM)
def _longcat_image() -> dict:
    return _flux_like()


def swiglu_feed_forward(prefix: str) -> dict:
    """diffusers ``FeedForward(activation_fn="swiglu")``: ``net.0.proj`` is the fused [up, gate] projection."""
    return {f"{prefix}.net.0.proj": _packed_col(1, 1), f"{prefix}.net.2": "rowwise"}


@tp_plan(
    "OvisImageTransformer2DModel", "transformer_ovis_image", packed_blocks=_SINGLE_STREAM,
    local_sizes={"single_transformer_blocks.*": ("mlp_hidden_dim",)},
)
def _ovis_image() -> dict:
    # SwiGLU everywhere: the single-stream proj_mlp is a fused [up, gate] projection too.
    return _flux_like(mlp_up=_packed_col(1, 1), ff=swiglu_feed_forward)


@tp_plan("GlmImageTransformer2DModel", "transformer_glm_image")
def _glm_image() -> dict:
    # CogView4 layout.
    return {**attention("transformer_blocks.*.attn1"), **feed_forward("transformer_blocks.*.ff")}


@tp_plan("MochiTransformer3DModel", "transformer_mochi", sharded_rotary={"rope": -2})
def _mochi() -> dict:
    # Asymmetric MMDiT: the text stream is narrower; the last block is context_pre_only. The rotary
    # (cos, sin) carry a heads axis (learned per-head frequencies): each rank keeps its heads' rows.
    return {
        **attention("transformer_blocks.*.attn1",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **swiglu_feed_forward("transformer_blocks.*.ff"),
        **swiglu_feed_forward("transformer_blocks.*.ff_context"),
    }


# -------------------------------------------------------------------------------------------- Sana


@tp_plan(
    "SanaTransformer2DModel", "sana_transformer",
    notes="attention only: the GLUMBConv feed-forward is made of Conv2d layers, which torch's "
          "ColwiseParallel/RowwiseParallel do not shard, so it stays replicated",
)
def _sana() -> dict:
    # Linear self-attention (attn1, ReLU kernel per head) and softmax cross-attention (attn2).
    return {**attention("transformer_blocks.*.attn1"), **attention("transformer_blocks.*.attn2")}


# ---------------------------------------------------------------------------------------- CogView4


@tp_plan("CogView4Transformer2DModel", "transformer_cogview4")
def _cogview4() -> dict:
    return {**attention("transformer_blocks.*.attn1"), **feed_forward("transformer_blocks.*.ff")}


# ----------------------------------------------------------------------------------------- Lumina2


def _lumina_blocks(*lists: str, attn: str = "attn", ffn: str = "feed_forward", gate_up=("linear_1", "linear_3"),
                   down: str = "linear_2") -> dict:
    plan = {}
    for blocks in lists:
        plan.update(attention(f"{blocks}.{attn}"))
        plan.update({f"{blocks}.{ffn}.{name}": "colwise" for name in gate_up})
        plan[f"{blocks}.{ffn}.{down}"] = "rowwise"
    return plan


@tp_plan("Lumina2Transformer2DModel", "transformer_lumina2")
def _lumina2() -> dict:
    # GQA attention (fewer k/v heads; the processor derives them from the local k width) and a
    # SwiGLU FFN with separate gate (linear_1) and up (linear_3) projections.
    return _lumina_blocks("noise_refiner.*", "context_refiner.*", "layers.*")


# ------------------------------------------------------------------------------------------ Z-Image


@tp_plan("ZImageTransformer2DModel", "transformer_z_image")
def _z_image() -> dict:
    return _lumina_blocks("noise_refiner.*", "context_refiner.*", "layers.*", "siglip_refiner.*",
                          attn="attention", gate_up=("w1", "w3"), down="w2")


# ---------------------------------------------------------------------------------------- HiDream

# HiDream-I1 routes over 4 experts; the list covers up to 16 (entries a model lacks are skipped).
# Each expert is sharded like a dense SwiGLU FFN: routing (the replicated MoE gate) is identical on
# every rank, so every rank runs the same experts on the same tokens.
_HIDREAM_MAX_EXPERTS = 16


def _swiglu(prefix: str) -> dict:
    return {f"{prefix}.w1": "colwise", f"{prefix}.w3": "colwise", f"{prefix}.w2": "rowwise"}


@tp_plan(
    "HiDreamImageTransformer2DModel", "transformer_hidream_image",
    across_heads_norms=tuple(
        f"{blocks}.block.attn1.{norm}"
        for blocks in ("double_stream_blocks.*", "single_stream_blocks.*")
        for norm in ("q_rms_norm", "k_rms_norm", "q_rms_norm_t", "k_rms_norm_t")
    ),
)
def _hidream() -> dict:
    plan = {}
    for blocks in ("double_stream_blocks.*", "single_stream_blocks.*"):
        attn = f"{blocks}.block.attn1"
        plan.update(attention(attn, qkv=("to_q", "to_k", "to_v", "to_q_t", "to_k_t", "to_v_t"),
                              out=("to_out", "to_out_t")))
        for ffn in ("ff_i", "ff_t"):
            plan.update(_swiglu(f"{blocks}.block.{ffn}"))
            plan.update(_swiglu(f"{blocks}.block.{ffn}.shared_experts"))
            for expert in range(_HIDREAM_MAX_EXPERTS):
                plan.update(_swiglu(f"{blocks}.block.{ffn}.experts.{expert}"))
    return plan


@tp_plan(
    "WanVACETransformer3DModel", "transformer_wan_vace", across_heads_norms=_wan_norms("blocks.*", "vace_blocks.*")
)
def _wan_vace() -> dict:
    # VACE control blocks are Wan blocks with a replicated proj_in / proj_out around them.
    return {**_wan_blocks("blocks.*"), **_wan_blocks("vace_blocks.*")}


@tp_plan("ChronoEditTransformer3DModel", "transformer_chronoedit", across_heads_norms=_WAN_NORMS)
def _chronoedit() -> dict:
    return _wan_blocks()


@tp_plan("SkyReelsV2Transformer3DModel", "transformer_skyreels_v2", across_heads_norms=_WAN_NORMS)
def _skyreels_v2() -> dict:
    return _wan_blocks()


# ------------------------------------------------------------------------------------------- Krea2


def _krea2_blocks(blocks: str) -> dict:
    # GQA attention with a sigmoid output gate over the attention features (sharded with the heads)
    # and a SwiGLU FFN with separate gate / up projections.
    return {
        **attention(f"{blocks}.attn", qkv=("to_q", "to_k", "to_v", "to_gate")),
        f"{blocks}.ff.gate": "colwise",
        f"{blocks}.ff.up": "colwise",
        f"{blocks}.ff.down": "rowwise",
    }


@tp_plan("Krea2Transformer2DModel", "transformer_krea2")
def _krea2() -> dict:
    return {
        **_krea2_blocks("transformer_blocks.*"),
        **_krea2_blocks("text_fusion.layerwise_blocks.*"),
        **_krea2_blocks("text_fusion.refiner_blocks.*"),
    }


@tp_plan(
    "HunyuanVideoFramepackTransformer3DModel", "transformer_hunyuan_video_framepack",
    packed_blocks={"single_transformer_blocks.*.proj_out": _single_stream_widths},
)
def _hunyuan_video_framepack() -> dict:
    # HunyuanVideo's blocks; the extra history / image embedders stay replicated.
    return _hunyuan_dual_and_single("context_embedder.token_refiner.refiner_blocks.*")


# ---------------------------------------------------------------------------- PixArt / AuraFlow / CogVideoX


@tp_plan("PixArtTransformer2DModel", "pixart_transformer_2d")
def _pixart() -> dict:
    # BasicTransformerBlock: self-attention, cross-attention, GELU FFN.
    return {
        **attention("transformer_blocks.*.attn1"),
        **attention("transformer_blocks.*.attn2"),
        **feed_forward("transformer_blocks.*.ff"),
    }


def _aura_ff(prefix: str) -> dict:
    # silu(linear_1(x)) * linear_2(x) -> out_projection
    return {f"{prefix}.linear_1": "colwise", f"{prefix}.linear_2": "colwise", f"{prefix}.out_projection": "rowwise"}


@tp_plan("AuraFlowTransformer2DModel", "auraflow_transformer_2d")
def _auraflow() -> dict:
    return {
        **attention("joint_transformer_blocks.*.attn",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **_aura_ff("joint_transformer_blocks.*.ff"),
        **_aura_ff("joint_transformer_blocks.*.ff_context"),
        **attention("single_transformer_blocks.*.attn"),
        **_aura_ff("single_transformer_blocks.*.ff"),
    }


@tp_plan("CogVideoXTransformer3DModel", "cogvideox_transformer_3d")
def _cogvideox() -> dict:
    # Text and video tokens share one attention (expert AdaLN norms stay replicated).
    return {**attention("transformer_blocks.*.attn1"), **feed_forward("transformer_blocks.*.ff")}


@tp_plan("HeliosTransformer3DModel", "transformer_helios", across_heads_norms=_WAN_NORMS)
def _helios() -> dict:
    # Wan blocks (history-memory patch embedders stay replicated).
    return _wan_blocks()


@tp_plan("CosmosTransformer3DModel", "transformer_cosmos")
def _cosmos() -> dict:
    # Self-attention, cross-attention and GELU FFN, each behind an AdaLN-LoRA norm (replicated).
    return {
        **attention("transformer_blocks.*.attn1"),
        **attention("transformer_blocks.*.attn2"),
        **feed_forward("transformer_blocks.*.ff"),
    }


def _kandinsky5_attention(prefix: str) -> dict:
    return attention(prefix, qkv=("to_query", "to_key", "to_value"), out=("out_layer",))


@tp_plan("Kandinsky5Transformer3DModel", "transformer_kandinsky")
def _kandinsky5() -> dict:
    return {
        **_kandinsky5_attention("text_transformer_blocks.*.self_attention"),
        "text_transformer_blocks.*.feed_forward.in_layer": "colwise",
        "text_transformer_blocks.*.feed_forward.out_layer": "rowwise",
        **_kandinsky5_attention("visual_transformer_blocks.*.self_attention"),
        **_kandinsky5_attention("visual_transformer_blocks.*.cross_attention"),
        "visual_transformer_blocks.*.feed_forward.in_layer": "colwise",
        "visual_transformer_blocks.*.feed_forward.out_layer": "rowwise",
    }
