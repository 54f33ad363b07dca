"""Sana tiny random pipeline (Gemma2 text encoder, SanaTransformer2DModel, AutoencoderDC), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _tokenizer


def build_sana(seed: int = 0):
    """Sana, 32x32 images: 3-stage DC-AE (4x compression) -> 8x8 latents, patch 1 -> 64 image tokens."""
    from diffusers import AutoencoderDC, DPMSolverMultistepScheduler, SanaPipeline, SanaTransformer2DModel
    from transformers import Gemma2Config, Gemma2Model

    text_hidden = 16
    tokenizer = _tokenizer()
    config = Gemma2Config(
        vocab_size=len(tokenizer), hidden_size=text_hidden, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, max_position_embeddings=256, sliding_window=16,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    text_encoder = Gemma2Model(config).eval()
    torch.manual_seed(seed)
    # sample_size=8 (not 16/32/64/128): call with use_resolution_binning=False.
    transformer = SanaTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2,
        num_cross_attention_heads=4, cross_attention_head_dim=8, cross_attention_dim=32,
        caption_channels=text_hidden, sample_size=8,
    )
    torch.manual_seed(seed)
    vae = AutoencoderDC(
        in_channels=3, latent_channels=4, attention_head_dim=2,
        encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 8, 8), decoder_block_out_channels=(8, 8, 8),
        encoder_qkv_multiscales=((), (), (5,)), decoder_qkv_multiscales=((), (), (5,)),
        encoder_layers_per_block=(1, 1, 1), decoder_layers_per_block=(1, 1, 1),
        downsample_block_type="pixel_unshuffle", upsample_block_type="pixel_shuffle",
        decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407,
    )
    # Sana's scheduler config: flow-matching DPM-Solver++.
    scheduler = DPMSolverMultistepScheduler(
        algorithm_type="dpmsolver++", flow_shift=3.0, prediction_type="flow_prediction", solver_order=2,
        solver_type="midpoint", use_flow_sigmas=True, lower_order_final=True,
    )
    return SanaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                        scheduler=scheduler)


def _sana_embeds(pipe, prompt: str) -> dict:
    # complex_human_instruction=None: the call's default prepends ~300 tokens of instructions; here the
    # prompt alone is padded (right) to 16 tokens.
    embeds, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16,
                                            complex_human_instruction=None, device="cpu")
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 1.0, "use_resolution_binning": False,
               "complex_human_instruction": None}
