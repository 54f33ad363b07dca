"""Chroma (the Flux layout without CLIP)."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _image_vae, _t5_encoder, _tokenizer


def build_chroma(seed: int = 0):
    """Chroma (Flux layout, hf_neuron TP plan), 32x32 images."""
    from diffusers import ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler

    tokenizer = _tokenizer()
    text_encoder = _t5_encoder(len(tokenizer), d_model=16)
    torch.manual_seed(seed)
    transformer = ChromaTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=16, axes_dims_rope=(2, 2, 4), approximator_num_channels=8,
        approximator_hidden_dim=16, approximator_layers=1,
    )
    torch.manual_seed(seed)
    vae = _image_vae(4, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    return ChromaPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                          tokenizer=tokenizer, transformer=transformer)


def _chroma_embeds(pipe, prompt: str) -> dict:
    embeds, _, mask, _, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16,
                                               device="cpu")
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 1.0}
