"""Parts the tiny pipelines share: a local tokenizer and tiny T5 / CLIP text encoders over it."""

from __future__ import annotations

import torch

_EXTRA_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def _vision_token_ids(tokenizer) -> dict:
    """The special-token ids a Qwen-VL text encoder's config names."""
    tokens = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
              "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
    return {key: tokenizer.convert_tokens_to_ids(token) for key, token in tokens.items()}


def _tokenizer(extra_tokens: list[str] | None = None):
    from hf_neuron.tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    if extra_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": extra_tokens})
    return tokenizer


def _t5_encoder(vocab_size: int, d_model: int = 16, umt5: bool = False):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    config_cls, model_cls = (UMT5Config, UMT5EncoderModel) if umt5 else (T5Config, T5EncoderModel)
    config = config_cls(vocab_size=vocab_size, d_model=d_model, d_kv=4, d_ff=32, num_layers=2, num_heads=4,
                        relative_attention_num_buckets=8, relative_attention_max_distance=16)
    torch.manual_seed(0)
    return model_cls(config).eval()


def _clip_text_model(tokenizer, hidden_size: int = 16, projection_dim: int | None = None, seed: int = 0):
    """A tiny CLIP text model over ``tokenizer`` (with a projection head where ``projection_dim`` is
    given); its positions cover ``tokenizer.model_max_length``, to which the pipelines pad CLIP prompts."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=tokenizer.model_max_length,
        projection_dim=projection_dim or hidden_size, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model_cls = CLIPTextModelWithProjection if projection_dim else CLIPTextModel
    return model_cls(config).eval()


def _image_vae(stages: int = 4, vae_class=None, **config):
    """A tiny 2-D KL autoencoder (``stages`` blocks of 4 channels, 4 latent channels, ``stages - 1`` halvings of
    the image side): ``AutoencoderKL`` or a class with its arguments (``AutoencoderKLFlux2``)."""
    if vae_class is None:
        from diffusers import AutoencoderKL as vae_class

    return vae_class(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * stages,
                     up_block_types=("UpDecoderBlock2D",) * stages, block_out_channels=(4,) * stages,
                     layers_per_block=1, latent_channels=4, norm_num_groups=1, **config)
