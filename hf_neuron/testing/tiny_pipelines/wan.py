"""Wan 2.1 text-to-video."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _t5_encoder, _tokenizer


def build_wan(seed: int = 0):
    """Wan 2.1 text-to-video (hf_neuron TP plan), 2 latent frames of 8x8."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel

    tokenizer = _tokenizer()
    text_encoder = _t5_encoder(len(tokenizer), d_model=16, umt5=True)
    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
        text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32,
    )
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(base_dim=4, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), transformer=transformer)


def _wan_embeds(pipe, prompt: str) -> dict:
    embeds, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16, device="cpu")
    return {"prompt_embeds": embeds}


CALL_KWARGS = {"height": 16, "width": 16, "num_frames": 5, "guidance_scale": 1.0}
