"""Tiny random configurations of diffusers transformer classes, with matching forward inputs.

Shared by the diffusers compatibility checks (:mod:`hf_neuron.compat.diffusers`), the adapter tests,
the benchmark and the example script. Every config has 2 repeated blocks (of each kind), a
hidden size of a few dozen and an even head count, so TP=2 splits whole heads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
from typing import Callable

import torch


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """``redrawn``: fnmatch patterns of parameters re-drawn from a seeded normal after the seeded build.
    Some classes zero-initialise layers (AdaLN gates, the final projection), as training from scratch
    starts, or allocate them with ``torch.empty``: with them zero every block's contribution is multiplied
    by 0, and a sharding error would not show in the output."""

    class_name: str
    config: dict
    make_inputs: Callable[[torch.Generator], dict]
    redrawn: tuple[str, ...] = ()

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
        if self.redrawn:
            generator = torch.Generator().manual_seed(seed + 1)
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.redrawn):
                        param.copy_(0.1 * torch.randn(param.shape, generator=generator))
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


def tiny(class_name: str, *, redrawn: tuple[str, ...] = (), **config):
    def register(make_inputs: Callable[[torch.Generator], dict]):
        TINY[class_name] = TinySpec(class_name, config, make_inputs, tuple(redrawn))
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


def _flux_layout_inputs(g):
    """Inputs of the Flux-layout transformers without pooled or guidance inputs: 16 packed image rows
    (a 4x4 grid), 6 text rows, position ids over 3 axes."""
    return {
        "hidden_states": randn(g, 1, 16, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_ids": _ids(16, axes=3),
        "txt_ids": torch.zeros(6, 3),
    }


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


@tiny(
    "QwenImage21Transformer2DModel",
    patch_size=1, in_channels=8, out_channels=8, num_layers=2, attention_head_dim=16, num_attention_heads=4,
    context_in_dim=16, mlp_ratio=2, axes_dims_rope=(4, 6, 6),
)
def _qwenimage21(g):
    # Text to image: the encoder sequence is 6 text slots then 4 image slots, each slot standing for 2x2
    # latent tokens of the 4x4 target grid; the last prompt token is padding.
    return {
        "hidden_states": randn(g, 1, 16, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([0.5]),
        "img_shapes": [[(1, 4, 4)]],
        "img_mask": torch.tensor([[False] * 6 + [True] * 4]),
        "encoder_hidden_states_mask": torch.tensor([[True] * 5 + [False]]),
    }


# ------------------------------------------------------------------------------------------ Chroma


@tiny(
    "ChromaTransformer2DModel",
    patch_size=1, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, axes_dims_rope=(2, 2, 4), approximator_num_channels=8, approximator_hidden_dim=16,
    approximator_layers=1,
)
def _chroma(g):
    return _flux_layout_inputs(g)


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
    return _flux_layout_inputs(g)


@tiny(
    "OvisImageTransformer2DModel",
    patch_size=1, in_channels=4, out_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8,
    num_attention_heads=4, joint_attention_dim=16, axes_dims_rope=(2, 2, 4),
)
def _ovis_image(g):
    return _flux_layout_inputs(g)


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


# ------------------------------------------------- BasicTransformerBlock (DiT / Transformer2D / Latte)


# Every block carries its own AdaLN-Zero class + timestep embedder (replicated): 10 classes and width 64
# keep them from outweighing the sharded attention / FFN the way they never do at DiT-XL's width 1152.
@tiny(
    "DiTTransformer2DModel",
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2, sample_size=8,
    patch_size=2, num_embeds_ada_norm=10,
)
def _dit(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([500.0]),
        "class_labels": torch.tensor([3]),
    }


# Continuous-input mode as in the Stable Diffusion UNets: GroupNorm, linear proj_in, cross-attention and
# the default GEGLU feed-forward (a packed [hidden, gate] projection).
@tiny(
    "Transformer2DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=8, out_channels=8, num_layers=2, norm_num_groups=2,
    cross_attention_dim=16, use_linear_projection=True,
)
def _transformer_2d(g):
    return {"hidden_states": randn(g, 1, 8, 4, 4), "encoder_hidden_states": randn(g, 1, 6, 16)}


@tiny(
    "LatteTransformer3DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, cross_attention_dim=32,
    sample_size=8, patch_size=2, activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
    norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6, caption_channels=16, video_length=2,
)
def _latte(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


# 4 blocks: the long skips join block 0's output into block 3 (the only block with a skip_linear).
@tiny(
    "HunyuanDiT2DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=4, patch_size=2, sample_size=8, hidden_size=32,
    num_layers=4, cross_attention_dim=16, cross_attention_dim_t5=16, pooled_projection_dim=16, text_len=4,
    text_len_t5=6,
)
def _hunyuan_dit(g):
    from diffusers.models.embeddings import get_2d_rotary_pos_embed

    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 4, 16),
        "text_embedding_mask": torch.tensor([[1, 1, 1, 0]]),
        "encoder_hidden_states_t5": randn(g, 1, 6, 16),
        "text_embedding_mask_t5": torch.tensor([[1, 1, 1, 1, 0, 0]]),
        "image_meta_size": torch.tensor([[64.0, 64.0, 64.0, 64.0, 0.0, 0.0]]),
        "style": torch.tensor([0]),
        "image_rotary_emb": get_2d_rotary_pos_embed(8, ((0, 0), (4, 4)), (4, 4), output_type="pt"),
    }


# GQA (2 key/value heads for 4 query heads); the rotary embedding is a complex tensor over an 8x8 grid.
@tiny(
    "LuminaNextDiT2DModel",
    sample_size=8, patch_size=2, in_channels=4, hidden_size=32, num_layers=2, num_attention_heads=4, num_kv_heads=2,
    multiple_of=16, cross_attention_dim=16,
)
def _lumina_next(g):
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_mask": torch.tensor([[1, 1, 1, 1, 0, 0]]),
        "image_rotary_emb": get_2d_rotary_pos_embed_lumina(8, 8, 8),
        "cross_attention_kwargs": {},  # the blocks unpack it into every attention call
    }


# One conditioning image's 4 tokens replace placeholder ids 2..5 of the 8 text ids; the sequence is
# text, one time token, then the 16 output-image tokens.
@tiny(
    "OmniGenTransformer2DModel",
    in_channels=4, patch_size=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
    num_layers=2, pad_token_id=0, vocab_size=64, max_position_embeddings=64, original_max_position_embeddings=32,
    rope_scaling={"short_factor": [1.0] * 4, "long_factor": [2.0] * 4}, pos_embed_max_size=8, time_step_dim=16,
)
def _omnigen(g):
    seq = 8 + 1 + 16
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([0.5]),
        "input_ids": torch.randint(1, 64, (1, 8), generator=g),
        "input_img_latents": [randn(g, 1, 4, 4, 4)],
        "input_image_sizes": {0: [[2, 6]]},
        "attention_mask": torch.ones(1, seq, seq),
        "position_ids": torch.arange(seq).unsqueeze(0),
    }


@tiny(
    "AllegroTransformer3DModel",
    patch_size=2, patch_size_t=1, num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
    num_layers=2, cross_attention_dim=32, sample_height=8, sample_width=8, sample_frames=2, caption_channels=16,
)
def _allegro(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0]]),
    }


# CogVideoX-style blocks with rotary embeddings and the face-identity branch on: a local facial extractor
# (2 scales of ViT features) and a Perceiver cross-attention after every block (kv width 64 * 2/3 = 42).
@tiny(
    "ConsisIDTransformer3DModel",
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=16,
    text_embed_dim=16, num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
    max_text_seq_length=6, use_rotary_positional_embeddings=True, is_train_face=True, cross_attn_interval=1,
    cross_attn_dim_head=16, cross_attn_num_heads=4, LFE_id_dim=16, LFE_vit_dim=16, LFE_depth=2, LFE_dim_head=8,
    LFE_num_heads=2, LFE_num_id_token=2, LFE_num_querie=4, LFE_output_dim=42, LFE_ff_mult=2, LFE_num_scale=2,
)
def _consisid(g):
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    return {
        "hidden_states": randn(g, 1, 3, 4, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "image_rotary_emb": get_3d_rotary_pos_embed(16, ((0, 0), (4, 4)), (4, 4), 3),
        "id_cond": randn(g, 1, 16),
        "id_vit_hidden": [randn(g, 1, 5, 16), randn(g, 1, 5, 16)],
    }


# Every block MMDiT (mmdit_layers == num_layers, as in the released checkpoints); head_dim 16 so that the
# 3-D rotary splits it into even (t, h, w) parts.
@tiny(
    "EasyAnimateTransformer3DModel",
    num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, patch_size=2, sample_width=8,
    sample_height=8, num_layers=2, mmdit_layers=2, time_embed_dim=16, text_embed_dim=16,
)
def _easyanimate(g):
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


# -------------------------------------------------------------------------------------------- Bria


@tiny(
    "BriaTransformer2DModel",
    patch_size=1, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, axes_dims_rope=(2, 2, 4),
)
def _bria(g):
    return _flux_layout_inputs(g)


@tiny(
    "BriaFiboTransformer2DModel",
    patch_size=1, in_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
    joint_attention_dim=16, axes_dims_rope=(2, 2, 4), text_encoder_dim=16,
)
def _bria_fibo(g):
    # One text-encoder layer per block (2 dual + 2 single), each projected to half the hidden size; drawn
    # after the Flux-layout inputs.
    return {**_flux_layout_inputs(g), "text_encoder_layers": [randn(g, 1, 6, 16) for _ in range(4)]}


@tiny(
    "BriaFibo2Transformer2DModel",
    in_channels=4, patch_size=2, dim=32, n_layers=2, n_refiner_layers=2, n_heads=4, cap_feat_dim=16,
    injection_layer_ids=(1,), perceiver_num_layers=2, min_num_gist_tokens=4, max_num_gist_tokens=8, gist_step=4,
    gist_min_text_len=4, gist_max_text_len=12, axes_dims=(2, 2, 4), axes_lens=(16, 8, 8),
)
def _bria_fibo2(g):
    # encoder_hidden_states stacks text-encoder layers: [0] feeds the perceiver, [1] the injection layer.
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, 2, 6, 16),
        "encoder_attention_mask": torch.tensor([[True] * 5 + [False]]),
        "context_latents": [randn(g, 1, 4, 4, 4)],
    }


# ---------------------------------------------------------------------------------------- CogView3


@tiny(
    "CogView3PlusTransformer2DModel",
    patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
    text_embed_dim=16, time_embed_dim=8, condition_dim=4, pos_embed_max_size=16, sample_size=8,
)
def _cogview3plus(g):
    return _cogview4(g)  # the same conditioning inputs as CogView4


# -------------------------------------------------------------------------------------- ERNIE-Image


@tiny(
    "ErnieImageTransformer2DModel", redrawn=("adaLN_modulation.1.*", "final_linear.*"),
    hidden_size=32, num_attention_heads=4, num_layers=2, ffn_hidden_size=64, in_channels=4, out_channels=4,
    patch_size=1, text_in_dim=16, rope_axes_dim=(2, 2, 4),
)
def _ernie_image(g):
    return {
        "hidden_states": randn(g, 1, 4, 4, 4),
        "timestep": torch.tensor([500.0]),
        "text_bth": randn(g, 1, 6, 16),
        "text_lens": torch.tensor([5]),
    }


# --------------------------------------------------------------------------------------- Ideogram 4


@tiny(
    "Ideogram4Transformer2DModel",
    in_channels=16, num_layers=2, attention_head_dim=8, num_attention_heads=4, intermediate_size=64, adaln_dim=16,
    llm_features_dim=24, rope_theta=10000, mrope_section=(2, 1, 1),
)
def _ideogram4(g):
    # One packed sequence: 6 text tokens (indicator 3), then a 4x4 grid of image tokens (indicator 2).
    text, image = 6, 16
    positions = torch.zeros(1, text + image, 3, dtype=torch.long)
    positions[0, :text] = torch.arange(text)[:, None]
    positions[0, text:, 0] = text
    positions[0, text:, 1] = torch.arange(image) // 4
    positions[0, text:, 2] = torch.arange(image) % 4
    return {
        "hidden_states": randn(g, 1, text + image, 16),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, text + image, 24),
        "position_ids": positions,
        "segment_ids": torch.zeros(1, text + image, dtype=torch.long),
        "indicator": torch.tensor([[3] * text + [2] * image]),
    }


# ----------------------------------------------------------------------------------------- DreamLite


@tiny(
    "DreamLiteTransformer2DModel",
    num_attention_heads=4, attention_head_dim=8, in_channels=8, num_layers=2, norm_num_groups=4,
    cross_attention_dim=16, qk_norm="rms_norm", ff_mult=2,
)
def _dreamlite(g):
    return {
        "hidden_states": randn(g, 1, 8, 4, 4),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


# -------------------------------------------------------------------------------------- Nucleus MoE


@tiny(
    "NucleusMoEImageTransformer2DModel", redrawn=("transformer_blocks.*.img_mlp.experts.*",),  # allocated with torch.empty
    # dim 48 so that the dense FFN width, int(dim * 8 / 3) // 128 * 128, is not 0. Block 0 is dense,
    # block 1 MoE (4 experts, each choosing 8 of the 16 image tokens).
    patch_size=2, in_channels=16, num_layers=2, attention_head_dim=12, num_attention_heads=4, num_key_value_heads=2,
    joint_attention_dim=16, axes_dims_rope=(4, 4, 4), dense_moe_strategy="leave_first_block_dense", num_experts=4,
    moe_intermediate_dim=32, capacity_factors=2.0,
)
def _nucleus_moe_image(g):
    return {
        "hidden_states": randn(g, 1, 16, 16),
        "img_shapes": [(1, 4, 4)],
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_hidden_states_mask": torch.tensor([[True] * 5 + [False]]),
        "timestep": torch.tensor([0.5]),
    }


# --------------------------------------------------------------------------------------------- PRX


@tiny(
    "PRXTransformer2DModel", redrawn=("blocks.*.modulation.lin.*",),
    in_channels=4, patch_size=2, context_in_dim=16, hidden_size=32, mlp_ratio=2.0, num_heads=4, depth=2,
    axes_dim=[4, 4],
)
def _prx(g):
    return {
        "hidden_states": randn(g, 1, 4, 8, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "attention_mask": torch.tensor([[True] * 5 + [False]]),
    }


# ------------------------------------------------------------------------------------------ AnyFlow

_ANYFLOW_TINY = dict(
    patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=12, in_channels=4, out_channels=4, text_dim=16,
    freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32,
)


def _anyflow_inputs(g, frames: int) -> dict:
    # Per-frame latents (B, F, C, H, W); a source timestep t and a target timestep r per frame.
    return {
        "hidden_states": randn(g, 1, frames, 4, 8, 8),
        "timestep": torch.full((1, frames), 500.0),
        "r_timestep": torch.full((1, frames), 250.0),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


@tiny("AnyFlowTransformer3DModel", **_ANYFLOW_TINY)
def _anyflow(g):
    return _anyflow_inputs(g, frames=2)


# ----------------------------------------------------------------------------------------- JoyImage

_JOYIMAGE_TINY = dict(
    patch_size=[1, 2, 2], in_channels=4, hidden_size=32, num_attention_heads=4, text_dim=16, mlp_width_ratio=2.0,
    num_layers=2, rope_dim_list=[2, 2, 4],
)


@tiny("JoyImageEditTransformer3DModel", **_JOYIMAGE_TINY)
def _joyimage_edit(g):
    return {
        "hidden_states": randn(g, 1, 4, 1, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
    }


@tiny("JoyImageEditPlusTransformer3DModel", **_JOYIMAGE_TINY)
def _joyimage_edit_plus(g):
    # Pre-patchified input (B, patches, C, pt, ph, pw): a 2x4 target and a 2x2 reference, padded to 14 patches.
    return {
        "hidden_states": randn(g, 1, 14, 4, 1, 2, 2),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_hidden_states_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
        "shape_list": [[(1, 2, 4), (1, 2, 2)]],
    }


# -------------------------------------------------------------------------------------- Kandinsky 6


@tiny(
    "Kandinsky6Transformer3DModel",
    in_visual_dim=4, out_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, patch_size=(1, 2, 2),
    model_dim=32, ff_dim=64, num_text_blocks=2, num_visual_blocks=2, axes_dims=(4, 2, 2), in_audio_dim=4,
    out_audio_dim=4, text_token_padding=True, ca_rope=True, cross_gates=True, fix_modulation=True,
)
def _kandinsky6(g):
    # Video latents (B, T, H, W, 2 * 4 + 1: noisy latent, condition latent, condition mask) and audio latents.
    return {
        "hidden_states": randn(g, 1, 2, 8, 8, 9),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "pooled_projections": randn(g, 1, 8),
        "timestep": torch.tensor([500.0]),
        "audio_hidden_states": randn(g, 1, 5, 4),
    }


# -------------------------------------------------------------------------------------- Motif-Video


@tiny(
    "MotifVideoTransformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2, num_single_layers=3,
    num_decoder_layers=1, mlp_ratio=2.0, patch_size=2, patch_size_t=1, text_embed_dim=16, image_embed_dim=8,
    rope_axes_dim=(2, 2, 4), enable_text_cross_attention_dual=True, enable_text_cross_attention_single=True,
)
def _motif_video(g):
    # Text cross-attention in every block but the last single-stream one (a decoder block, which attends
    # the encoder output instead of the text).
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
        "image_embeds": randn(g, 1, 3, 8),
    }


# ------------------------------------------------------------------------------------ Wan Animate


@tiny(
    "WanAnimateTransformer3DModel",
    **{k: v for k, v in _WAN_TINY.items() if k != "in_channels"}, in_channels=12, latent_channels=4, image_dim=16,
    motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16}, motion_encoder_size=16, motion_style_dim=8,
    motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16, face_encoder_num_heads=2,
    inject_face_latents_blocks=1,
)
def _wan_animate(g):
    # 5 face frames become 3 motion frames (the face encoder's strided convs plus a leading pad), one per
    # latent frame of the 3-frame video (the reference frame, then 2 frames that also get pose latents).
    return {
        "hidden_states": randn(g, 1, 12, 3, 8, 8),
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "encoder_hidden_states_image": randn(g, 1, 4, 16),
        "pose_hidden_states": randn(g, 1, 4, 2, 8, 8),
        "face_pixel_values": randn(g, 1, 3, 5, 16, 16),
    }


@tiny(
    "WanAnimate2Transformer3DModel",
    patch_size=(1, 2, 2), text_len=8, in_dim=8, dim=48, ffn_dim=64, freq_dim=16, text_dim=16, out_dim=4,
    num_heads=4, num_layers=2,
)
def _wan_animate_2(g):
    # The reference pass (kv_cache_mode="extract"), which fills a fresh per-layer KV cache; the image
    # projection's input width is fixed at CLIP's 1280.
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    return {
        "hidden_states": [randn(g, 4, 2, 8, 8)],
        "timestep": torch.tensor([500.0]),
        "encoder_hidden_states": [randn(g, 6, 16)],
        "condition_latents": [randn(g, 4, 2, 8, 8)],
        "encoder_hidden_states_image": randn(g, 1, 3, 1280),
        "kv_cache": WanAnimate2KVCache(2),
        "kv_cache_mode": "extract",
        "seq_len": 2 * 4 * 4,
        "offset_grid_sizes": torch.tensor([[2, 4, 4]]),
    }


# -------------------------------------------------------------------------------------- Sana-Video


@tiny(
    "SanaVideoTransformer3DModel",
    in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=12, num_layers=2,
    num_cross_attention_heads=4, cross_attention_head_dim=12, cross_attention_dim=48, caption_channels=16,
    sample_size=8,
)
def _sana_video(g):
    # head_dim 12 splits into even rotary parts (frames 4, height 4, width 4).
    return {
        "hidden_states": randn(g, 1, 4, 2, 8, 8),
        "encoder_hidden_states": randn(g, 1, 6, 16),
        "timestep": torch.tensor([500.0]),
        "encoder_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
    }


# ------------------------------------------------------------------------------------- Stable Audio


@tiny(
    "StableAudioDiTModel",
    sample_size=8, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
    num_key_value_attention_heads=2, out_channels=4, cross_attention_dim=16, time_proj_dim=16,
    global_states_input_dim=16, cross_attention_input_dim=16,
)
def _stable_audio(g):
    # As the pipeline calls it: one global (duration) token is prepended to the 8 latent steps, and the
    # rotary embedding covers half of each head's features over those 9 positions.
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    return {
        "hidden_states": randn(g, 1, 4, 8),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": randn(g, 1, 5, 16),
        "global_hidden_states": randn(g, 1, 1, 16),
        "rotary_embedding": get_1d_rotary_pos_embed(4, 9, use_real=True, repeat_interleave_real=False),
    }
