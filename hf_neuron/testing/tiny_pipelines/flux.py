"""Tiny random FluxPipeline (FLUX.1-dev layout: CLIP pooled + T5 sequence, guidance embedding), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _clip_text_model, _image_vae, _t5_encoder, _tokenizer

CLIP_MAX_LENGTH = 16  # the pipeline pads CLIP prompts to tokenizer.model_max_length
T5_MAX_LENGTH = 16



def build_flux(seed: int = 0):
    """FLUX.1 (upstream TP plan and repeated blocks), 32x32 images: 4 latent channels packed 2x2 (in_channels 16)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    tokenizer = _tokenizer()
    tokenizer.model_max_length = CLIP_MAX_LENGTH
    text_encoder = _clip_text_model(tokenizer, hidden_size=16, seed=seed)
    tokenizer_2 = _tokenizer()
    text_encoder_2 = _t5_encoder(len(tokenizer_2), d_model=16)
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=16, pooled_projection_dim=16, guidance_embeds=True,
        axes_dims_rope=(2, 2, 4),
    )
    torch.manual_seed(seed)
    vae = _image_vae(4, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.1159, scaling_factor=0.3611)
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True),
                        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, text_encoder_2=text_encoder_2,
                        tokenizer_2=tokenizer_2, transformer=transformer)


def _flux_embeds(pipe, prompt: str) -> dict:
    with torch.no_grad():  # the text encoder's outputs, no autograd graph
        embeds, pooled, _text_ids = pipe.encode_prompt(prompt, device="cpu", max_sequence_length=T5_MAX_LENGTH)
    return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}


# guidance_scale feeds the distilled guidance embedding (not CFG); true_cfg_scale=1.0 keeps CFG off.
CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 3.5, "true_cfg_scale": 1.0}
