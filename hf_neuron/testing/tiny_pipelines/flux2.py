"""Tiny random Flux2Pipeline (FLUX.2-dev layout: Mistral3 text encoder, AutoencoderKLFlux2, guidance embedding),
32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _image_vae, _tokenizer

_PIXTRAL_TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]
# The pipeline prepends its system message (135 tokens with the tiny tokenizer and the check's prompt) and pads or
# truncates on the right to max_sequence_length: 144 keeps the whole prompt.
MAX_SEQUENCE_LENGTH = 144
TEXT_HIDDEN = 16
# Upstream stacks hidden states (10, 20, 30) of a 40-layer Mistral; the tiny encoder has 3 layers.
TEXT_ENCODER_OUT_LAYERS = (1, 2, 3)


def build_flux2(seed: int = 0):
    """FLUX.2 (upstream TP plan and repeated blocks), 32x32 images: 4 latent channels patchified 2x2 (in_channels 16);
    the text embedding is 3 stacked hidden states of a tiny Mistral3 (3 x 16 = joint_attention_dim 48)."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Pipeline, Flux2Transformer2DModel
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    # Upstream's `tokenizer` component is a PixtralProcessor, which Transformers gates on torchvision (a placeholder
    # class where torchvision is missing, as here). Text-to-image only calls `apply_chat_template` on it, which the
    # tokenizer itself implements with the same arguments, so the tokenizer is the component (the Pixtral image tokens
    # are added so the Mistral3 config's image_token_index names a real token).
    tokenizer = _tokenizer(_PIXTRAL_TOKENS)
    config = Mistral3Config(
        text_config={
            "model_type": "mistral", "vocab_size": len(tokenizer), "hidden_size": TEXT_HIDDEN, "intermediate_size": 32,
            "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
            "max_position_embeddings": 512, "sliding_window": None, "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config={
            "model_type": "pixtral", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "head_dim": 8, "patch_size": 8, "image_size": 64,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"), spatial_merge_size=2,
    )
    torch.manual_seed(seed)
    text_encoder = Mistral3ForConditionalGeneration(config).eval()
    torch.manual_seed(seed)
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8, num_attention_heads=4,
        joint_attention_dim=len(TEXT_ENCODER_OUT_LAYERS) * TEXT_HIDDEN, timestep_guidance_channels=16, mlp_ratio=3.0,
        axes_dims_rope=(2, 2, 2, 2), guidance_embeds=True,
    )
    torch.manual_seed(seed)
    vae = _image_vae(4, vae_class=AutoencoderKLFlux2, use_quant_conv=False, use_post_quant_conv=False, sample_size=32)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, time_shift_type="exponential")
    return Flux2Pipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder,
                         tokenizer=tokenizer, transformer=transformer)


def _flux2_embeds(pipe, prompt: str) -> dict:
    with torch.no_grad():  # the text encoder's outputs, no autograd graph
        embeds, _text_ids = pipe.encode_prompt(prompt, device="cpu", max_sequence_length=MAX_SEQUENCE_LENGTH,
                                               text_encoder_out_layers=TEXT_ENCODER_OUT_LAYERS)
    return {"prompt_embeds": embeds}


# guidance_scale feeds the distilled guidance embedding (Flux2Pipeline has no CFG). The text-encoder settings only
# matter when the pipeline is called with a prompt instead of prompt_embeds.
CALL_KWARGS = {"height": 32, "width": 32, "guidance_scale": 4.0, "max_sequence_length": MAX_SEQUENCE_LENGTH,
               "text_encoder_out_layers": TEXT_ENCODER_OUT_LAYERS}
