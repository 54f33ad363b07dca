"""Tiny random configurations of diffusers transformer classes, with matching forward inputs.

Shared by the diffusers compatibility checks (:mod:`hf_neuron.compat.diffusers`), the adapter tests,
the benchmark and the example script. Every config has 2 repeated blocks (of each kind), a
hidden size of a few dozen and an even head count, so TP=2 splits whole heads.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import torch


@dataclasses.dataclass(frozen=True)
class TinySpec:
    class_name: str
    config: dict
    make_inputs: Callable[[torch.Generator], dict]

    def model_class(self):
        import diffusers

        cls = getattr(diffusers, self.class_name, None)
        if cls is None:
            cls = getattr(importlib.import_module("diffusers.models.transformers"), self.class_name)
        return cls

    def build(self, seed: int = 0, dtype: torch.dtype = torch.float32):
        # Resolve the class first: its first import may draw random numbers, which must not shift the weights.
        cls = self.model_class()
        torch.manual_seed(seed)
        model = cls(**self.config).eval()
        return model if dtype == torch.float32 else model.to(dtype)

    def inputs(self, seed: int = 0, device="cpu", dtype: torch.dtype = torch.float32) -> dict:
        generator = torch.Generator().manual_seed(seed)
        inputs = self.make_inputs(generator)
        return {key: _to(value, device, dtype) for key, value in inputs.items()}


def _to(value, device, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(item, device, dtype) for item in value)
    if isinstance(value, dict):
        return {key: _to(item, device, dtype) for key, item in value.items()}
    return value


TINY: dict[str, TinySpec] = {}


def tiny(class_name: str, **config):
    def register(make_inputs: Callable[[torch.Generator], dict]):
        TINY[class_name] = TinySpec(class_name, config, make_inputs)
        return make_inputs

    return register


def randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator)


def output_tensors(output) -> list[torch.Tensor]:
    """The tensors of a model output (tuple, ModelOutput or nested), flattened in a stable order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = list(output.values())
    tensors = []
    if isinstance(output, (list, tuple)):
        for item in output:
            tensors.extend(output_tensors(item))
    return tensors


# --------------------------------------------------------------------------------------------- SD3


@tiny(
    "SD3Transformer2DModel",
    sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
    pos_embed_max_size=16, dual_attention_layers=(0,), qk_norm="rms_norm",
)
def _sd3(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "pooled_projections": randn(g, 1, 16),
        "timestep": torch.tensor([500.0]),
    }


# --------------------------------------------------------------------------------------------- Wan


@tiny(
    "WanTransformer3DModel",
    patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=12, in_channels=4, out_channels=4,
    text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32,
)
def _wan(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


# -------------------------------------------------------------------------------------- MiniMax H3


@tiny(
    "MiniMaxH3Transformer3DModel",
    num_attention_heads=4, attention_head_dim=16, hidden_size=32, num_layers=2, num_refiner_layers=2, ffn_dim=48,
    in_channels=4, audio_in_channels=8, patch_size=(1, 2, 2), text_dim=16, freq_dim=16, time_embed_hidden_dim=32,
    time_embed_dim=16, rope_freq_dim=2,
)
def _minimax_h3(g):
    # Packed layout: 4 text rows, 8 video rows (2x4 grid), 4 audio rows.
    text, video, audio = 4, 8, 4
    seq = text + video + audio
    tags = torch.tensor([1] * text + [0] * video + [2] * audio)
    positions = torch.zeros(seq, 3, dtype=torch.long)
    positions[:text, 0] = torch.arange(text)
    positions[text:text + video, 1] = torch.arange(video) // 4
    positions[text:text + video, 2] = torch.arange(video) % 4
    positions[text + video:, 0] = torch.arange(audio)
    return {
        "hidden_states": randn(g, 1, video, 16),
        "audio_hidden_states": randn(g, 1, audio, 8),
        "encoder_hidden_states": randn(g, 1, text, 16),
        "timestep": torch.tensor([0.5]),
        "timestep_indices": torch.zeros(seq, dtype=torch.long),
        "token_tags": tags,
        "position_ids": positions,
        "video_indices": torch.arange(text, text + video),
        "audio_indices": torch.arange(text + video, seq),
        "text_indices": torch.arange(text),
    }


# ------------------------------------------------------------------------------------------- Flux3


def _ids(rows: int, axes: int = 4, offset: int = 0) -> torch.Tensor:
    ids = torch.zeros(rows, axes)
    ids[:, 0] = offset
    ids[:, -2] = torch.arange(rows) // 4
    ids[:, -1] = torch.arange(rows) % 4
    return ids


@tiny(
    "Flux3Transformer2DModel",
    in_channels=16, cond_in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
    num_attention_heads=4, joint_attention_dim=16, timestep_channels=32, axes_dims_rope=(4, 4, 4, 4),
)
def _flux3(g):
    return {
        "hidden_states": randn(g, 1, 16, 16),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16),
        "txt_ids": torch.zeros(6, 4),
        "image_cond_hidden_states": randn(g, 1, 8, 16),
        "image_cond_ids": _ids(8, offset=1),
    }


# --------------------------------------------------------------------------------------- LTX / LTX2


@tiny(
    "LTXVideoTransformer3DModel",
    in_channels=8, out_channels=8, num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
    num_layers=2, caption_channels=16,
)
def _ltx(g):
    return {
        "hidden_states": randn(g, 1, 2 * 4 * 4, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0]]),
        "num_frames": 2, "height": 4, "width": 4,
    }


@tiny(
    "LTX2VideoTransformer3DModel",
    in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=4, attention_head_dim=8,
    cross_attention_dim=32, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=4,
    audio_attention_head_dim=4, audio_cross_attention_dim=16, num_layers=2, caption_channels=16,
    rope_double_precision=False, gated_attn=True, audio_gated_attn=True,
)
def _ltx2(g):
    return {
        "hidden_states": randn(g, 1, 2 * 4 * 4, 4),
        "audio_hidden_states": randn(g, 1, 5, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "audio_encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.ones(1, 6, dtype=torch.bool),
        "num_frames": 2, "height": 4, "width": 4, "audio_num_frames": 5, "fps": 25.0,
    }


# ---------------------------------------------------------------------------------- HunyuanVideo


@tiny(
    "HunyuanVideoTransformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2, num_single_layers=2,
    num_refiner_layers=2, patch_size=1, text_embed_dim=16, pooled_projection_dim=8, rope_axes_dim=(2, 2, 4),
)
def _hunyuan_video(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 4, 4),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
        "pooled_projections": randn(g, 1, 8),
        "guidance": torch.tensor([3500.0]),
    }


@tiny(
    "HunyuanVideo15Transformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2, num_refiner_layers=2,
    patch_size=1, text_embed_dim=16, text_embed_2_dim=8, image_embed_dim=8, rope_axes_dim=(2, 2, 4),
)
def _hunyuan_video15(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 4, 4),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
        "encoder_hidden_states_2": randn(g, 1, 4, 8),
        "encoder_attention_mask_2": torch.tensor([[1, 1, 1, 0]]),
        "image_embeds": randn(g, 1, 3, 8),
    }


@tiny(
    "HunyuanImageTransformer2DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2, num_single_layers=2,
    num_refiner_layers=2, patch_size=(1, 1), text_embed_dim=16, rope_axes_dim=(4, 4),
)
def _hunyuan_image(g):
    return {
        "hidden_states": randn(g, 1, 4, 4, 4),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
    }


# --------------------------------------------------------------------------------- Flux / Flux2 (upstream plans)


@tiny(
    "FluxTransformer2DModel",
    patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, pooled_projection_dim=16, guidance_embeds=True, axes_dims_rope=(2, 2, 4),
)
def _flux(g):
    return {
        "hidden_states": randn(g, 1, 16, 16),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "pooled_projections": randn(g, 1, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16, axes=3),
        "txt_ids": torch.zeros(6, 3),
        "guidance": torch.tensor([3.5]),
    }


@tiny(
    "Flux2Transformer2DModel",
    patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=48, timestep_guidance_channels=16, mlp_ratio=3.0, axes_dims_rope=(2, 2, 2, 2),
    guidance_embeds=True,
)
def _flux2(g):
    return {
        "hidden_states": randn(g, 1, 16, 16),
        "encoder_hidden_states": randn(g, 1, 6, 48),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16),
        "txt_ids": torch.zeros(6, 4),
        "guidance": torch.tensor([4.0]),
    }


# -------------------------------------------------------------------------------- Qwen-Image (upstream plan)


@tiny(
    "QwenImageTransformer2DModel",
    patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=4,
    joint_attention_dim=16, axes_dims_rope=(4, 6, 6),
)
def _qwenimage(g):
    return {
        "hidden_states": randn(g, 1, 16, 16),  # a 4x4 grid of packed latents
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_hidden_states_mask": torch.ones(1, 6, dtype=torch.long),
        "timestep": torch.tensor([0.5]),
        "img_shapes": [(1, 4, 4)],
    }


# ------------------------------------------------------------------------------------------ Chroma


@tiny(
    "ChromaTransformer2DModel",
    patch_size=1, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, axes_dims_rope=(2, 2, 4), approximator_num_channels=8, approximator_hidden_dim=16,
    approximator_layers=1,
)
def _chroma(g):
    return {
        "hidden_states": randn(g, 1, 16, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16, axes=3),
        "txt_ids": torch.zeros(6, 3),
    }


@tiny(
    "SanaTransformer2DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2,
    num_cross_attention_heads=4, cross_attention_head_dim=8, cross_attention_dim=32, caption_channels=16,
    sample_size=8,
)
def _sana(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
    }


@tiny(
    "CogView4Transformer2DModel",
    patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
    text_embed_dim=16, time_embed_dim=8, condition_dim=4, pos_embed_max_size=16, sample_size=8, rope_axes_dim=(4, 4),
)
def _cogview4(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "original_size": torch.tensor([[64.0, 64.0]]),
        "target_size": torch.tensor([[64.0, 64.0]]),
        "crop_coords": torch.tensor([[0.0, 0.0]]),
    }


@tiny(
    "Lumina2Transformer2DModel",
    sample_size=8, patch_size=2, in_channels=4, hidden_size=32, num_layers=2, num_refiner_layers=2,
    num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=(4, 2, 2), axes_lens=(16, 16, 16),
    cap_feat_dim=16,
)
def _lumina2(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
    }


@tiny(
    "ZImageTransformer2DModel",
    all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=48, n_layers=2, n_refiner_layers=2, n_heads=4,
    n_kv_heads=4, cap_feat_dim=16, axes_dims=[4, 4, 4], axes_lens=[64, 32, 32],
)
def _z_image(g):
    return {
        "x": [randn(g, 4, 1, 8, 8)],
        "t": torch.tensor([0.5]),
        "cap_feats": [randn(g, 6, 16)],
    }


@tiny(
    "HiDreamImageTransformer2DModel",
    patch_size=2, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    caption_channels=[8, 4], text_emb_dim=8, num_routed_experts=4, num_activated_experts=2, axes_dims_rope=(4, 2, 2),
    max_resolution=(16, 16), llama_layers=[0, 1, 2, 3],
)
def _hidream(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timesteps": torch.tensor([500.0]),
        "encoder_hidden_states_t5": randn(g, 1, 6, 8),
        "encoder_hidden_states_llama3": randn(g, 4, 1, 6, 4),
        "pooled_embeds": randn(g, 1, 8),
    }


# ------------------------------------------------------------------------------------- Wan family

_WAN_TINY = dict(
    patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=12, in_channels=4, out_channels=4, text_dim=16,
    freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32,
)


def _wan_inputs(g, **extra):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        **extra,
    }


@tiny("WanVACETransformer3DModel", **_WAN_TINY, vace_layers=[0, 1], vace_in_channels=8)
def _wan_vace(g):
    return _wan_inputs(g, control_hidden_states=randn(g, 1, 8, 2, 8, 8))


@tiny("ChronoEditTransformer3DModel", **_WAN_TINY)
def _chronoedit(g):
    return _wan_inputs(g)


@tiny("SkyReelsV2Transformer3DModel", **_WAN_TINY)
def _skyreels_v2(g):
    return _wan_inputs(g)


# ------------------------------------------------------------------------------------------- Krea2


@tiny(
    "Krea2Transformer2DModel",
    in_channels=16, num_layers=2, attention_head_dim=8, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=64, timestep_embed_dim=32, text_hidden_dim=16, num_text_layers=2, text_num_attention_heads=4,
    text_num_key_value_heads=4, text_intermediate_size=32, num_layerwise_text_blocks=2, num_refiner_text_blocks=2,
    axes_dims_rope=(2, 2, 4),
)
def _krea2(g):
    text, image = 6, 16
    positions = torch.zeros(text + image, 3, dtype=torch.long)
    positions[text:, 1] = torch.arange(image) // 4
    positions[text:, 2] = torch.arange(image) % 4
    return {
        "hidden_states": randn(g, 1, image, 16),
        "encoder_hidden_states": randn(g, 1, text, 2, 16),
        "timestep": torch.tensor([0.5]),
        "position_ids": positions,
        "encoder_attention_mask": torch.tensor([[True] * 5 + [False]]),
    }


# ------------------------------------------------------------------------------ Flux-like families


@tiny(
    "LongCatImageTransformer2DModel",
    patch_size=1, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, pooled_projection_dim=16, axes_dims_rope=[2, 2, 4],
)
def _longcat_image(g):
    return {
        "hidden_states": randn(g, 1, 16, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16, axes=3),
        "txt_ids": torch.zeros(6, 3),
    }


@tiny(
    "OvisImageTransformer2DModel",
    patch_size=1, in_channels=4, out_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8,
    num_attention_heads=4, joint_attention_dim=16, axes_dims_rope=(2, 2, 4),
)
def _ovis_image(g):
    return {
        "hidden_states": randn(g, 1, 16, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16, axes=3),
        "txt_ids": torch.zeros(6, 3),
    }


@tiny(
    "GlmImageTransformer2DModel",
    patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
    text_embed_dim=16, time_embed_dim=8, condition_dim=4, prior_vq_quantizer_codebook_size=32,
)
def _glm_image(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "prior_token_id": torch.randint(0, 32, (1, 16), generator=g),
        "prior_token_drop": torch.zeros(1, 16, dtype=torch.bool),
        "timestep": torch.tensor([500.0]),
        "target_size": torch.tensor([[64.0, 64.0]]),
        "crop_coords": torch.tensor([[0.0, 0.0]]),
    }


@tiny(
    "MochiTransformer3DModel",
    patch_size=2, num_attention_heads=4, attention_head_dim=12, num_layers=2, pooled_projection_dim=16,
    in_channels=4, text_embed_dim=16, time_embed_dim=4, max_sequence_length=8,
)
def _mochi(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "encoder_hidden_states": randn(g, 1, 8, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]]),
    }


@tiny(
    "HunyuanVideoFramepackTransformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2, num_single_layers=2,
    num_refiner_layers=2, patch_size=2, text_embed_dim=16, pooled_projection_dim=8, rope_axes_dim=(2, 2, 4),
    image_condition_type=None, has_image_proj=True, image_proj_dim=16, has_clean_x_embedder=True,
)
def _hunyuan_video_framepack(g):
    # History latents at 1x / 2x / 4x compression (the embedder's 3-D conv strides), as FramePack feeds them.
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
        "pooled_projections": randn(g, 1, 8),
        "image_embeds": randn(g, 1, 3, 16),
        "indices_latents": torch.arange(6, 8),
        "guidance": torch.tensor([3500.0]),
        "latents_clean": randn(g, 1, 4, 1, 8, 8),
        "indices_latents_clean": torch.arange(0, 1),
        "latents_history_2x": randn(g, 1, 4, 2, 8, 8),
        "indices_latents_history_2x": torch.arange(1, 3),
        "latents_history_4x": randn(g, 1, 4, 4, 8, 8),
        "indices_latents_history_4x": torch.arange(2, 6),
    }


@tiny(
    "PixArtTransformer2DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, cross_attention_dim=32,
    sample_size=8, caption_channels=16, norm_num_groups=1,
)
def _pixart(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
    }


@tiny(
    "AuraFlowTransformer2DModel",
    sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=2, num_single_dit_layers=2, attention_head_dim=8,
    num_attention_heads=4, joint_attention_dim=16, caption_projection_dim=32, out_channels=4, pos_embed_max_size=16,
)
def _auraflow(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
    }


@tiny(
    "CogVideoXTransformer3DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4, time_embed_dim=8, text_embed_dim=16,
    num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2, max_text_seq_length=6,
)
def _cogvideox(g):
    return {
        "hidden_states": randn(g, 1, 3, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
    }


@tiny("HeliosTransformer3DModel", **{k: v for k, v in _WAN_TINY.items() if k != "rope_max_seq_len"}, rope_dim=(4, 4, 4))
def _helios(g):
    return _wan_inputs(g)


@tiny(
    "CosmosTransformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=16, num_layers=2, text_embed_dim=16,
    adaln_lora_dim=4, max_size=(4, 16, 16), patch_size=(1, 2, 2),
    concat_padding_mask=False,  # resizing the padding mask needs torchvision
)
def _cosmos(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


@tiny(
    "Kandinsky5Transformer3DModel",
    in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
    model_dim=32, ff_dim=64, num_text_blocks=2, num_visual_blocks=2, axes_dims=(4, 2, 2),
)
def _kandinsky5(g):
    return {
        "hidden_states": randn(g, 1, 2, 8, 8, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "pooled_projections": randn(g, 1, 8),
        "visual_rope_pos": (torch.arange(2), torch.arange(4), torch.arange(4)),
        "text_rope_pos": torch.arange(6),
    }
