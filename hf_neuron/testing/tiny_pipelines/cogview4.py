"""CogView4 tiny random pipeline (GLM text encoder, CogView4Transformer2DModel, AutoencoderKL), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _image_vae, _tokenizer


def build_cogview4(seed: int = 0):
    """CogView4, 32x32 images: 3-stage VAE (4x compression) -> 8x8 latents, patch 2 -> 16 image tokens."""
    from diffusers import CogView4Pipeline, CogView4Transformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import GlmConfig, GlmModel

    text_hidden = 16
    tokenizer = _tokenizer()
    config = GlmConfig(
        vocab_size=len(tokenizer), hidden_size=text_hidden, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    text_encoder = GlmModel(config).eval()
    torch.manual_seed(seed)
    transformer = CogView4Transformer2DModel(
        patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
        text_embed_dim=text_hidden, time_embed_dim=8, condition_dim=4, pos_embed_max_size=16, sample_size=8,
        rope_axes_dim=(4, 4),
    )
    torch.manual_seed(seed)
    vae = _image_vae(3, use_quant_conv=False, use_post_quant_conv=False, scaling_factor=1.0)
    # CogView4's scheduler config: dynamic (linear) shifting from mu computed by the pipeline.
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256, base_shift=0.25, max_image_seq_len=4096, max_shift=0.75, shift=1.0,
        time_shift_type="linear", use_dynamic_shifting=True,
    )
    return CogView4Pipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                            scheduler=scheduler)


def _cogview4_embeds(pipe, prompt: str) -> dict:
    # GLM embeds are left-padded to a multiple of 16 tokens (hidden_states[-2]); no mask is used.
    embeds, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16, device="cpu")
    return {"prompt_embeds": embeds}


CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 1.0}
