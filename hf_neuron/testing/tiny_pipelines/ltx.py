"""Tiny random LTX-Video (LTXPipeline) text-to-video pipeline: 32x32, 5 frames -> 2 latent frames of 8x8."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _t5_encoder, _tokenizer


def build_ltx(seed: int = 0):
    """LTX-Video text-to-video, 2 latent frames of 8x8 (VAE: 4x spatial / 4x temporal compression)."""
    from diffusers import (
        AutoencoderKLLTXVideo,
        FlowMatchEulerDiscreteScheduler,
        LTXPipeline,
        LTXVideoTransformer3DModel,
    )

    latent_channels, text_hidden = 8, 16
    tokenizer = _tokenizer()
    tokenizer.padding_side = "right"  # as T5's tokenizer (the tiny tokenizer pads on the left)
    text_encoder = _t5_encoder(len(tokenizer), d_model=text_hidden)
    torch.manual_seed(seed)
    # inner dim = 4 heads x 8 = 32 = cross_attention_dim (caption_projection maps caption_channels -> inner dim).
    transformer = LTXVideoTransformer3DModel(
        in_channels=latent_channels, out_channels=latent_channels, patch_size=1, patch_size_t=1,
        num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32, num_layers=2,
        caption_channels=text_hidden,
    )
    torch.manual_seed(seed)
    # Two spatio-temporal scaling stages with patch_size 1: spatial and temporal compression 4, so
    # 32x32x5 frames -> 8x8x2 latents.
    vae = AutoencoderKLLTXVideo(
        in_channels=3, out_channels=3, latent_channels=latent_channels, block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1), spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False, False, False, False, False), upsample_residual=(False, False, False, False),
        upsample_factor=(1, 1, 1, 1), timestep_conditioning=False, patch_size=1, patch_size_t=1,
        encoder_causal=True, decoder_causal=False,
    )
    return LTXPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                       tokenizer=tokenizer, transformer=transformer)


def _ltx_embeds(pipe, prompt: str) -> dict:
    embeds, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16,
                                            device="cpu")
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


# height / width must be divisible by 32 (check_inputs); num_frames = 4k + 1 for the 4x temporal compression.
CALL_KWARGS = {"height": 32, "width": 32, "num_frames": 5, "guidance_scale": 1.0}
