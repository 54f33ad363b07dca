"""PixArt-Sigma tiny random pipeline (T5 text encoder, PixArtTransformer2DModel, AutoencoderKL), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _image_vae, _t5_encoder, _tokenizer


def build_pixart(seed: int = 0):
    """PixArt-Sigma, 32x32 images: 3-stage VAE (4x compression) -> 8x8 latents, patch 2 -> 16 tokens."""
    from diffusers import DPMSolverMultistepScheduler, PixArtSigmaPipeline, PixArtTransformer2DModel

    tokenizer = _tokenizer()
    text_encoder = _t5_encoder(len(tokenizer), d_model=16)
    torch.manual_seed(seed)
    # sample_size=8 (not 32/64/128/256): call with use_resolution_binning=False.
    transformer = PixArtTransformer2DModel(
        num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2,
        cross_attention_dim=32, sample_size=8, caption_channels=16, norm_num_groups=1,
    )
    torch.manual_seed(seed)
    vae = _image_vae(3, scaling_factor=0.13025)
    return PixArtSigmaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                               scheduler=DPMSolverMultistepScheduler())


def _pixart_embeds(pipe, prompt: str) -> dict:
    embeds, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16,
                                            device="cpu")
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 1.0, "use_resolution_binning": False}
