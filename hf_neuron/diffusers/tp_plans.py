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


# ------------------------------------------------------------- BasicTransformerBlock (DiT / Latte)


def _sized_packed_col():
    """Packed colwise whose block sizes come from the plan's ``packed_blocks`` (set per Linear)."""
    from diffusers.hooks.tensor_parallel import PackedColwiseParallel

    return PackedColwiseParallel(None)


def _ff_in_blocks(prefix: str):
    """Block sizes of a diffusers ``FeedForward``'s input projection, read from the block's activation.

    GEGLU / SwiGLU project to ``[hidden, gate]`` and ``chunk(2)`` it: two halves, each sharded on its own.
    GELU and the others project to one hidden width: a single block, i.e. plain colwise.
    """

    def sizes(block) -> list[int]:
        activation = block.get_submodule(prefix)
        width = activation.proj.out_features
        return [width // 2, width // 2] if type(activation).__name__ in ("GEGLU", "SwiGLU") else [width]

    return sizes


def _basic_blocks(*lists: str) -> dict:
    """Plan for ModuleLists of ``BasicTransformerBlock``.

    Self-attention (attn1), the optional cross-attention (attn2, absent without ``cross_attention_dim``)
    and the feed-forward, whose activation the config picks (``"geglu"`` by default, GELU for DiT).
    """
    plan = {}
    for blocks in lists:
        plan.update(attention(f"{blocks}.attn1"))
        plan.update(attention(f"{blocks}.attn2"))
        plan[f"{blocks}.ff.net.0.proj"] = _sized_packed_col()
        plan[f"{blocks}.ff.net.2"] = "rowwise"
    return plan


def _basic_packed(*lists: str) -> dict:
    """The ``packed_blocks`` of :func:`_basic_blocks`' feed-forward input projections."""
    return {f"{blocks}.ff.net.0.proj": _ff_in_blocks("ff.net.0") for blocks in lists}


_BASIC_PACKED = _basic_packed("transformer_blocks.*")


@tp_plan("DiTTransformer2DModel", "dit_transformer_2d", packed_blocks=_BASIC_PACKED)
def _dit() -> dict:
    # Class-conditional DiT: self-attention and GELU FFN behind AdaLN-Zero (replicated).
    return _basic_blocks("transformer_blocks.*")


@tp_plan("Transformer2DModel", "transformer_2d", packed_blocks=_BASIC_PACKED)
def _transformer_2d() -> dict:
    # The generic 2-D transformer (continuous, patched or vectorized inputs) around BasicTransformerBlocks.
    return _basic_blocks("transformer_blocks.*")


@tp_plan(
    "LatteTransformer3DModel", "latte_transformer_3d",
    packed_blocks=_basic_packed("transformer_blocks.*", "temporal_transformer_blocks.*"),
)
def _latte() -> dict:
    # Spatial blocks (with cross-attention) alternate with temporal blocks (self-attention only).
    return _basic_blocks("transformer_blocks.*", "temporal_transformer_blocks.*")


# ------------------------------------------------------------------------------------ Hunyuan-DiT


@tp_plan("HunyuanDiT2DModel", "hunyuan_transformer_2d")
def _hunyuan_dit() -> dict:
    # Self- and cross-attention (per-head LayerNorm QK norms) and a GELU FFN; the long-skip
    # skip_linear of the second half of the blocks stays replicated.
    return {
        **attention("blocks.*.attn1"),
        **attention("blocks.*.attn2"),
        **feed_forward("blocks.*.ff"),
    }


# ------------------------------------------------------------------------------------- LuminaNext


@tp_plan(
    "LuminaNextDiT2DModel", "lumina_nextdit2d",
    # qk_norm="layer_norm_across_heads": LayerNorm(heads * head_dim) applied before the heads split.
    across_heads_norms=tuple(f"layers.*.{a}.{n}" for a in ("attn1", "attn2") for n in ("norm_q", "norm_k")),
    # The tanh gate scaling the cross-attention output holds one value per head.
    sharded_parameters={"layers.*.gate": 0},
)
def _lumina_next() -> dict:
    # attn1 has no output projection (to_out is Identity): the self- and cross-attention outputs are
    # summed per head and go through attn2.to_out.0 together, so that one rowwise layer closes both.
    return {
        **attention("layers.*.attn1", out=()),
        **attention("layers.*.attn2"),
        "layers.*.feed_forward.linear_1": "colwise",
        "layers.*.feed_forward.linear_3": "colwise",
        "layers.*.feed_forward.linear_2": "rowwise",
    }


# ---------------------------------------------------------------------------------------- OmniGen


@tp_plan("OmniGenTransformer2DModel", "transformer_omnigen", local_sizes={"layers.*.self_attn": ("out_dim",)})
def _omnigen() -> dict:
    # Phi-3 style decoder layers: GQA self-attention over the joint text + image sequence (its processor
    # reshapes the heads' output to `attn.out_dim`, made a per-rank width) and a fused gate+up SwiGLU MLP.
    return {
        **attention("layers.*.self_attn"),
        "layers.*.mlp.gate_up_proj": _packed_col(1, 1),
        "layers.*.mlp.down_proj": "rowwise",
    }


# ----------------------------------------------------------------------------------------- Allegro


@tp_plan("AllegroTransformer3DModel", "transformer_allegro")
def _allegro() -> dict:
    # PixArt-style blocks (self-attention, cross-attention, GELU FFN) with a per-block scale-shift table.
    return {
        **attention("transformer_blocks.*.attn1"),
        **attention("transformer_blocks.*.attn2"),
        **feed_forward("transformer_blocks.*.ff"),
    }


# ----------------------------------------------------------------------------------------- ConsisID


@tp_plan("ConsisIDTransformer3DModel", "consisid_transformer_3d",
         local_sizes={"perceiver_cross_attention.*": ("heads",)})
def _consisid() -> dict:
    # CogVideoX blocks, plus the identity cross-attentions inserted every `cross_attn_interval` blocks:
    # a Perceiver attention from the video tokens to the face tokens with a fused [k, v] projection.
    # The local facial extractor that produces the face tokens runs once per step and stays replicated.
    return {
        **attention("transformer_blocks.*.attn1"),
        **feed_forward("transformer_blocks.*.ff"),
        "perceiver_cross_attention.*.to_q": "colwise",
        "perceiver_cross_attention.*.to_kv": _packed_col(1, 1),
        "perceiver_cross_attention.*.to_out": "rowwise",
    }


# ------------------------------------------------------------------------------------- EasyAnimate


@tp_plan(
    "EasyAnimateTransformer3DModel", "transformer_easyanimate",
    notes="MMDiT blocks only: a block past `mmdit_layers` adds the text tokens' attention output to the "
          "residual without an output projection, which a rowwise layer cannot close (it would need an "
          "all-gather); the released checkpoints have mmdit_layers == num_layers",
)
def _easyanimate() -> dict:
    # MMDiT blocks: separate text projections (add_*_proj, to_add_out) and a text FFN (txt_ff).
    return {
        **attention("transformer_blocks.*.attn1",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **feed_forward("transformer_blocks.*.ff"),
        **feed_forward("transformer_blocks.*.txt_ff"),
    }


# -------------------------------------------------------------------------------------------- Bria


@tp_plan("BriaTransformer2DModel", "transformer_bria", packed_blocks=_SINGLE_STREAM)
def _bria() -> dict:
    # Flux layout without pooled projections or guidance.
    return _flux_like()


@tp_plan("BriaFiboTransformer2DModel", "transformer_bria_fibo", packed_blocks=_SINGLE_STREAM)
def _bria_fibo() -> dict:
    # Flux layout; the per-block caption projections of the text-encoder layers stay replicated.
    return _flux_like()


@tp_plan("BriaFibo2Transformer2DModel", "transformer_bria_fibo2")
def _bria_fibo2() -> dict:
    # Lumina-like blocks (self-attention, optional cross-attention to a text-encoder layer, SwiGLU FFN
    # with separate gate w1 / up w3), plus the perceiver that resamples the text into gist tokens.
    plan = {}
    for blocks in ("noise_refiner.*", "layers.*"):
        plan.update(attention(f"{blocks}.attention"))
        plan.update(attention(f"{blocks}.cross_attention"))  # only on the injection layers
        plan.update(_swiglu(f"{blocks}.feed_forward"))
    plan.update(attention("perceiver.layers.*.cross_attention"))
    plan.update(attention("perceiver.layers.*.self_attention"))
    plan.update(_swiglu("perceiver.layers.*.ffn"))
    return plan


# ---------------------------------------------------------------------------------------- CogView3


@tp_plan("CogView3PlusTransformer2DModel", "transformer_cogview3plus")
def _cogview3plus() -> dict:
    # CogVideoX-style joint attention over text + image tokens, one FFN over both.
    return {**attention("transformer_blocks.*.attn1"), **feed_forward("transformer_blocks.*.ff")}


# -------------------------------------------------------------------------------------- ERNIE-Image


@tp_plan("ErnieImageTransformer2DModel", "transformer_ernie_image")
def _ernie_image() -> dict:
    # One shared AdaLN modulation (replicated, outside the blocks); GELU-gated FFN with separate
    # gate / up projections.
    return {
        **attention("layers.*.self_attention"),
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.linear_fc2": "rowwise",
    }


# --------------------------------------------------------------------------------------- Ideogram 4


@tp_plan("Ideogram4Transformer2DModel", "transformer_ideogram4")
def _ideogram4() -> dict:
    # One packed text + image sequence; the processor splits heads with `num_heads` and `head_dim`.
    return {**attention("layers.*.attention"), **_swiglu("layers.*.feed_forward")}


# ----------------------------------------------------------------------------------------- DreamLite


@tp_plan("DreamLiteTransformer2DModel", "transformer_2d_dreamlite")
def _dreamlite() -> dict:
    # BasicTransformerBlock variant (attn1 may be absent); the default GEGLU FFN's net.0.proj is a fused
    # [hidden, gate] projection (packed [1, 1]).
    return {
        **attention("transformer_blocks.*.attn1"),
        **attention("transformer_blocks.*.attn2"),
        "transformer_blocks.*.ff.net.0.proj": _packed_col(1, 1),
        "transformer_blocks.*.ff.net.2": "rowwise",
    }


# -------------------------------------------------------------------------------------- Nucleus MoE


@tp_plan(
    "NucleusMoEImageTransformer2DModel", "transformer_nucleusmoe_image",
    # The processor derives head_dim and the GQA kv-head count from these widths.
    local_sizes={"transformer_blocks.*.attn": ("inner_dim", "inner_kv_dim")},
    notes="the routed experts stay replicated: SwiGLUExperts keeps them as 3-D Parameters, not Linear "
          "layers, which torch's ColwiseParallel/RowwiseParallel do not shard",
)
def _nucleus_moe_image() -> dict:
    # Image queries attend to image + text keys/values (GQA); dense blocks have a SwiGLU FFN, MoE blocks
    # a replicated router, replicated routed experts and a sharded shared expert.
    return {
        **attention("transformer_blocks.*.attn", qkv=("to_q", "to_k", "to_v", "add_k_proj", "add_v_proj")),
        **swiglu_feed_forward("transformer_blocks.*.img_mlp"),
        **swiglu_feed_forward("transformer_blocks.*.img_mlp.shared_expert"),
    }


# --------------------------------------------------------------------------------------------- PRX


@tp_plan("PRXTransformer2DModel", "transformer_prx")
def _prx() -> dict:
    # Image tokens attend to text + image; fused image [q, k, v] and text [k, v] projections.
    return {
        "blocks.*.attention.img_qkv_proj": _packed_col(1, 1, 1),
        "blocks.*.attention.txt_kv_proj": _packed_col(1, 1),
        "blocks.*.attention.to_out.0": "rowwise",
        "blocks.*.gate_proj": "colwise",
        "blocks.*.up_proj": "colwise",
        "blocks.*.down_proj": "rowwise",
    }


# ------------------------------------------------------------------------------------------ AnyFlow


@tp_plan("AnyFlowTransformer3DModel", "transformer_anyflow", across_heads_norms=_WAN_NORMS)
def _anyflow() -> dict:
    # Wan 2.1 blocks (self-attention, cross-attention, GELU FFN) with the dual-timestep embedder replicated.
    return _wan_blocks()


# ----------------------------------------------------------------------------------------- JoyImage


def _joyimage_blocks(blocks: str = "double_blocks.*") -> dict:
    # Double-stream blocks; each stream has a fused [q, k, v] projection that is chunk(3)-ed (packed [1, 1, 1])
    # and per-head QK norms over head_dim.
    plan = {}
    for stream in ("img", "txt"):
        plan[f"{blocks}.attn.{stream}_attn_qkv"] = _packed_col(1, 1, 1)
        plan[f"{blocks}.attn.{stream}_attn_proj"] = "rowwise"
        plan.update(feed_forward(f"{blocks}.{stream}_mlp"))
    return plan


@tp_plan("JoyImageEditTransformer3DModel", "transformer_joyimage")
def _joyimage_edit() -> dict:
    return _joyimage_blocks()


@tp_plan("JoyImageEditPlusTransformer3DModel", "transformer_joyimage_edit_plus")
def _joyimage_edit_plus() -> dict:
    return _joyimage_blocks()


# -------------------------------------------------------------------------------------- Kandinsky 6


@tp_plan("Kandinsky6Transformer3DModel", "transformer_kandinsky6")
def _kandinsky6() -> dict:
    # Text encoder blocks per modality, then fused video/audio blocks: each stream's self- and text
    # cross-attention and FFN, plus the two cross-modal attentions (video queries audio, audio queries video).
    plan = {}
    for blocks in ("video_text_transformer_blocks.*", "audio_text_transformer_blocks.*"):
        plan.update(_kandinsky5_attention(f"{blocks}.attn"))
        plan.update(feed_forward(f"{blocks}.feed_forward"))
    fused = "visual_transformer_blocks.*"
    for stream in ("video_dec_block", "audio_dec_block"):
        plan.update(_kandinsky5_attention(f"{fused}.{stream}.self_attention"))
        plan.update(_kandinsky5_attention(f"{fused}.{stream}.cross_attention"))
        plan.update(feed_forward(f"{fused}.{stream}.feed_forward"))
    plan.update(_kandinsky5_attention(f"{fused}.va_cross_attention"))
    plan.update(_kandinsky5_attention(f"{fused}.av_cross_attention"))
    return plan


# -------------------------------------------------------------------------------------- Motif-Video


@tp_plan(
    "MotifVideoTransformer3DModel", "transformer_motif_video",
    packed_blocks={"single_transformer_blocks.*.proj_out": _single_stream_widths},
)
def _motif_video() -> dict:
    # HunyuanVideo layout (dual-stream MMDiT blocks, single-stream parallel attention + MLP blocks) with an
    # optional text cross-attention in each block.
    plan = {
        **attention("transformer_blocks.*.attn",
                    qkv=("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"),
                    out=("to_out.0", "to_add_out")),
        **attention("transformer_blocks.*.cross_attn"),
        **feed_forward("transformer_blocks.*.ff"),
        **feed_forward("transformer_blocks.*.ff_context"),
        **attention("single_transformer_blocks.*.attn", out=()),
        "single_transformer_blocks.*.proj_mlp": "colwise",
        "single_transformer_blocks.*.proj_out": _packed_row(),
    }
    # A single-stream cross-attention reads the attention output *before* proj_out, which each rank holds
    # only for its own heads: its query projection is rowwise (one all-reduce gives the full query), the
    # attention runs with all heads on every rank, and its output projection is colwise, so each rank keeps
    # the slice that lines up with its heads of the attention output it is added to.
    plan["single_transformer_blocks.*.cross_attn.to_q"] = "rowwise"
    plan["single_transformer_blocks.*.cross_attn.to_out.0"] = "colwise"
    return plan


# ------------------------------------------------------------------------------------ Wan Animate


@tp_plan(
    "WanAnimateTransformer3DModel", "transformer_wan_animate", across_heads_norms=_WAN_NORMS,
    # Each face adapter is itself the attention module (the ModuleList element), so its head count is
    # made per-rank as a local size.
    local_sizes={"face_adapter.*": ("heads",)},
)
def _wan_animate() -> dict:
    # Wan blocks plus the face adapters: temporally aligned cross-attention to the face motion features,
    # with per-head QK norms (the motion / face encoders stay replicated).
    return {**_wan_blocks(), **attention("face_adapter.*", out=("to_out",))}


@tp_plan(
    "WanAnimate2Transformer3DModel", "transformer_wan_animate_2",
    across_heads_norms=tuple(
        f"blocks.*.{attn}.{norm}"
        for attn, norms in (("self_attn", ("norm_q", "norm_k")), ("cross_attn", ("norm_q", "norm_k", "norm_added_k")))
        for norm in norms
    ),
)
def _wan_animate_2() -> dict:
    # Wan 2.1-style blocks (QK norms across heads); the reference KV cache holds each rank's own heads.
    return {
        **attention("blocks.*.self_attn"),
        **attention("blocks.*.cross_attn", qkv=("to_q", "to_k", "to_v", "add_k_proj", "add_v_proj")),
        "blocks.*.ffn.0": "colwise",
        "blocks.*.ffn.2": "rowwise",
    }


# -------------------------------------------------------------------------------------- Sana-Video


@tp_plan(
    "SanaVideoTransformer3DModel", "transformer_sana_video",
    across_heads_norms=tuple(f"transformer_blocks.*.{a}.{n}" for a in ("attn1", "attn2") for n in ("norm_q", "norm_k")),
    notes="attention only: the GLUMBTempConv feed-forward is made of Conv2d layers, which torch's "
          "ColwiseParallel/RowwiseParallel do not shard, so it stays replicated",
)
def _sana_video() -> dict:
    # Sana's linear self-attention and softmax cross-attention, with QK RMSNorms over all heads and a
    # per-head rotary embedding (it broadcasts over the heads, so each rank applies it to its own).
    return {**attention("transformer_blocks.*.attn1"), **attention("transformer_blocks.*.attn2")}


# ------------------------------------------------------------------------------------- Stable Audio


@tp_plan("StableAudioDiTModel", "stable_audio_transformer")
def _stable_audio() -> dict:
    # GQA cross-attention: the processor derives the local key/value head count from the local k width,
    # and contiguous colwise shards keep each rank's query heads with the key/value heads they repeat.
    blocks = "transformer_blocks.*"
    return {**attention(f"{blocks}.attn1"), **attention(f"{blocks}.attn2"), **swiglu_feed_forward(f"{blocks}.ff")}
