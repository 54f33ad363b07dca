"""Tiny random StableDiffusion3Pipeline (SD3.5 layout: two CLIP-with-projection + T5, dual attention in
block 0), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _clip_text_model, _image_vae, _t5_encoder, _tokenizer

CLIP_MAX_LENGTH = 16  # the pipeline pads both CLIP prompts to tokenizer.model_max_length
T5_MAX_LENGTH = 16



def build_sd3(seed: int = 0):
    """Stable Diffusion 3.5 (hf_neuron repeated blocks), 32x32 images: 4 latent channels, patch 2.

    The CLIP sequences (8 + 8 wide) are zero-padded to the T5 width (16 = joint_attention_dim); the pooled
    projections (8 + 8) are concatenated (16 = pooled_projection_dim).
    """
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    tokenizer = _tokenizer()
    tokenizer.model_max_length = CLIP_MAX_LENGTH
    text_encoder = _clip_text_model(tokenizer, hidden_size=8, projection_dim=8, seed=seed)
    tokenizer_2 = _tokenizer()
    tokenizer_2.model_max_length = CLIP_MAX_LENGTH
    text_encoder_2 = _clip_text_model(tokenizer_2, hidden_size=8, projection_dim=8, seed=seed + 1)
    tokenizer_3 = _tokenizer()
    text_encoder_3 = _t5_encoder(len(tokenizer_3), d_model=16)
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(
        sample_size=4, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
        joint_attention_dim=16, caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
        pos_embed_max_size=16, dual_attention_layers=(0,), qk_norm="rms_norm",
    )
    torch.manual_seed(seed)
    vae = _image_vae(4, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5305)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=text_encoder, tokenizer=tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2,
        text_encoder_3=text_encoder_3, tokenizer_3=tokenizer_3,
    )


def _sd3_embeds(pipe, prompt: str) -> dict:
    with torch.no_grad():  # the text encoder's outputs, no autograd graph
        embeds, _, pooled, _ = pipe.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None, device="cpu",
                                                  do_classifier_free_guidance=False, max_sequence_length=T5_MAX_LENGTH)
    return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}


CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 1.0}  # guidance_scale <= 1: no CFG
