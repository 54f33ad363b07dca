"""Tiny random HunyuanVideo (HunyuanVideoPipeline) text-to-video pipeline: 32x32, 5 frames -> 2 latent frames of 8x8."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _tokenizer

# The default template (DEFAULT_PROMPT_TEMPLATE, crop_start=95) is counted in Llama-3 tokens with Llama-3 header
# tokens; over the tiny tokenizer it is hundreds of tokens long, and crop_start=None would count the template padded
# to model_max_length (2048). A short chat template over the tiny tokenizer's own special tokens instead, with
# crop_start = the token count of the part before the prompt (computed by `_prompt_template`).
_TEMPLATE_PREFIX = "<|im_start|>user\n"
_TEMPLATE = _TEMPLATE_PREFIX + "{}<|im_end|>"
MAX_SEQUENCE_LENGTH = 16


def _prompt_template(tokenizer) -> dict:
    crop_start = len(tokenizer(_TEMPLATE_PREFIX, add_special_tokens=True).input_ids)
    return {"template": _TEMPLATE, "crop_start": crop_start}


def build_hunyuanvideo(seed: int = 0):
    """HunyuanVideo text-to-video, 2 latent frames of 8x8 (VAE: 4x spatial / 4x temporal compression)."""
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideoPipeline,
        HunyuanVideoTransformer3DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    latent_channels, text_hidden, clip_hidden = 4, 16, 8
    tokenizer = _tokenizer()
    # The tiny tokenizer pads on the left; HunyuanVideo's Llama tokenizer pads on the right, which the crop
    # (drop the first crop_start tokens) assumes.
    tokenizer.padding_side = "right"
    # Three layers: the pipeline takes hidden_states[-3] (num_hidden_layers_to_skip=2), the first layer's output.
    llama_config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=text_hidden, intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    text_encoder = LlamaModel(llama_config).eval()
    tokenizer_2 = _tokenizer()
    tokenizer_2.padding_side = "right"
    tokenizer_2.model_max_length = 77  # the pipeline pads the CLIP prompt to 77 tokens
    # CLIPTextModel pools at the first `eos_token_id`; the tiny tokenizer appends no end token, so (as CLIP's
    # tokenizer pads with its end token) the pad token is the pooled one: the first position after the prompt.
    clip_config = CLIPTextConfig(
        vocab_size=len(tokenizer_2), hidden_size=clip_hidden, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=77, projection_dim=clip_hidden,
        bos_token_id=tokenizer_2.bos_token_id, eos_token_id=tokenizer_2.pad_token_id,
        pad_token_id=tokenizer_2.pad_token_id,
    )
    torch.manual_seed(seed)
    text_encoder_2 = CLIPTextModel(clip_config).eval()
    torch.manual_seed(seed)
    transformer = HunyuanVideoTransformer3DModel(
        in_channels=latent_channels, out_channels=latent_channels, num_attention_heads=4, attention_head_dim=8,
        num_layers=2, num_single_layers=2, num_refiner_layers=2, patch_size=1, patch_size_t=1,
        text_embed_dim=text_hidden, pooled_projection_dim=clip_hidden, rope_axes_dim=(2, 2, 4),
    )
    torch.manual_seed(seed)
    # Three blocks: two spatial + two temporal downsamplings, so 32x32x5 frames -> 8x8x2 latents.
    vae = AutoencoderKLHunyuanVideo(
        in_channels=3, out_channels=3, latent_channels=latent_channels,
        down_block_types=("HunyuanVideoDownBlock3D",) * 3, up_block_types=("HunyuanVideoUpBlock3D",) * 3,
        block_out_channels=(8, 8, 8), layers_per_block=1, act_fn="silu", norm_num_groups=4,
        scaling_factor=0.476986, spatial_compression_ratio=4, temporal_compression_ratio=4,
        mid_block_add_attention=True,
    )
    return HunyuanVideoPipeline(text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer, vae=vae,
                                scheduler=FlowMatchEulerDiscreteScheduler(), text_encoder_2=text_encoder_2,
                                tokenizer_2=tokenizer_2)


def _hunyuanvideo_embeds(pipe, prompt: str) -> dict:
    embeds, pooled, mask = pipe.encode_prompt(prompt, prompt_template=_prompt_template(pipe.tokenizer),
                                              max_sequence_length=MAX_SEQUENCE_LENGTH, device="cpu")
    return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled, "prompt_attention_mask": mask}


# height / width divisible by 16 (check_inputs); num_frames = 4k + 1. true_cfg_scale=1.0: no (true) CFG;
# guidance_scale is the distilled model's embedded guidance (an input of the transformer, not a second pass).
CALL_KWARGS = {"height": 32, "width": 32, "num_frames": 5, "true_cfg_scale": 1.0, "guidance_scale": 6.0}
