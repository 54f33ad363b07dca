"""Tiny random pipelines, built locally (nothing is downloaded), for tests, examples and benchmarks.

Each builder returns a complete pipeline — tiny transformer, tiny VAE, tiny text encoder and its
tokenizer / processor, scheduler — with the transformer's heads divisible by 2 so TP=2 applies, and
``save_tiny_pipeline(family, out_dir)`` writes it with ``save_pretrained`` (safetensors), loadable
with ``<Pipeline>.from_pretrained(out_dir)``. ``FAMILIES`` also says how each pipeline is called with
embeddings computed on CPU (the text encoder stays on CPU, as in ``scripts/diffusers_tp_example.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch

_EXTRA_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def _vision_token_ids(tokenizer) -> dict:
    """The special-token ids a Qwen-VL text encoder's config names."""
    tokens = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
              "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
    return {key: tokenizer.convert_tokens_to_ids(token) for key, token in tokens.items()}


def _tokenizer(extra_tokens: list[str] | None = None):
    from hf_neuron.testing.tiny_models import build_tokenizer

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


# ------------------------------------------------------------------------------------ Qwen-Image 2.1


def build_qwenimage21(seed: int = 0):
    """Qwen-Image-2.1 (upstream TP plan), 32x32 images: the pipeline ``scripts/diffusers_tp_example.py`` runs."""
    from diffusers import (
        AutoencoderKLQwenImage21,
        FlowMatchEulerDiscreteScheduler,
        QwenImage21Pipeline,
        QwenImage21Transformer2DModel,
    )
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    z_dim, text_hidden = 8, 16
    torch.manual_seed(seed)
    transformer = QwenImage21Transformer2DModel(
        patch_size=1, in_channels=z_dim, out_channels=z_dim, num_layers=2, attention_head_dim=16,
        num_attention_heads=4, context_in_dim=text_hidden, mlp_ratio=2, axes_dims_rope=(4, 6, 6),
    )
    torch.manual_seed(seed)
    # Five dim_mult stages: the 16x spatial compression the pipeline assumes.
    vae = AutoencoderKLQwenImage21(
        base_dim=4, decoder_base_dim=4, z_dim=z_dim, dim_mult=[1, 1, 1, 1, 1], num_res_blocks=1, attn_scales=[],
        temperal_downsample=[False, True, True, True], latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim,
    )
    tokenizer = _tokenizer(_EXTRA_TOKENS)
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": text_hidden, "intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]},
        },
        vision_config={
            "depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": text_hidden,
            "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        **_vision_token_ids(tokenizer),
    )
    torch.manual_seed(seed)
    text_encoder = Qwen3VLForConditionalGeneration(config).eval()
    return QwenImage21Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
        processor=build_qwen3vl_processor(tokenizer),
        transformer=transformer,
    )


def build_qwen3vl_processor(tokenizer):
    """Qwen-Image-2.1's text-stack processor (Qwen3-VL) over ``tokenizer``, for 32x32 to 64x64 images."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor

    image_processor = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                            min_pixels=32 * 32, max_pixels=64 * 64)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                            video_processor=_qwen3vl_video_processor(), chat_template=tokenizer.chat_template)


def _qwen3vl_video_processor():
    """Qwen3-VL's video processor; where torchvision is missing (its class needs it), the stand-in
    hf_neuron loads checkpoints' video processors with there, saved under the real class's name."""
    from transformers.utils import is_torchvision_available

    settings = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2}
    if is_torchvision_available():
        from transformers import Qwen3VLVideoProcessor

        return Qwen3VLVideoProcessor(**settings)
    from hf_neuron.patching import get_fix
    from hf_neuron.transformers.processors import FIX, video_processor_class

    import transformers.processing_utils  # noqa: F401  (the fix is decided when this module is imported)

    if not get_fix(FIX).active:
        raise RuntimeError(
            "Qwen-Image-2.1's text processor (Qwen3-VL) needs torchvision, which is not importable here. "
            f"hf_neuron's fix {FIX!r} builds it without torchvision on a neuron device only: run with "
            "HF_NEURON_SIMULATOR=1 (the simulated device), or install a torchvision built for this torch."
        )

    return video_processor_class()(video_processor_type="Qwen3VLVideoProcessor", **settings)


def _qwenimage21_embeds(pipe, prompt: str) -> dict:
    embeds, mask, _ = pipe.encode_prompt(prompt=prompt, device="cpu")
    return {"prompt_embeds": embeds, "prompt_embeds_mask": mask}


# -------------------------------------------------------------------------------------- Qwen-Image


def build_qwenimage(seed: int = 0):
    """Qwen-Image (upstream TP plan), 32x32 images: the recipe of 2.1 with a Qwen2.5-VL text encoder and
    its tokenizer."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    z_dim, text_hidden = 4, 16
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=z_dim * 4, out_channels=z_dim, num_layers=2, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=text_hidden, axes_dims_rope=(4, 6, 6),
    )
    torch.manual_seed(seed)
    vae = AutoencoderKLQwenImage(base_dim=4, z_dim=z_dim, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, True, True],
                                 latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim)
    tokenizer = _tokenizer(_EXTRA_TOKENS)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": text_hidden, "intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]},
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2,
                       "out_hidden_size": text_hidden, "fullatt_block_indexes": [0]},
        **_vision_token_ids(tokenizer),
    )
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    return QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                             tokenizer=tokenizer, transformer=transformer)


def _qwenimage_embeds(pipe, prompt: str) -> dict:
    embeds, mask = pipe.encode_prompt(prompt=prompt, device="cpu")
    return {"prompt_embeds": embeds, "prompt_embeds_mask": mask}


# --------------------------------------------------------------------------------------------- Wan


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


# ------------------------------------------------------------------------------------------ Chroma


def build_chroma(seed: int = 0):
    """Chroma (Flux layout, hf_neuron TP plan), 32x32 images."""
    from diffusers import AutoencoderKL, ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler

    tokenizer = _tokenizer()
    text_encoder = _t5_encoder(len(tokenizer), d_model=16)
    torch.manual_seed(seed)
    transformer = ChromaTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=16, axes_dims_rope=(2, 2, 4), approximator_num_channels=8,
        approximator_hidden_dim=16, approximator_layers=1,
    )
    torch.manual_seed(seed)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(4, 4, 4, 4), layers_per_block=1,
        latent_channels=4, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=0.0609, scaling_factor=1.5035,
    )
    return ChromaPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                          tokenizer=tokenizer, transformer=transformer)


def _chroma_embeds(pipe, prompt: str) -> dict:
    embeds, _, mask, _, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=16,
                                               device="cpu")
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


@dataclasses.dataclass(frozen=True)
class PipelineFamily:
    name: str
    build: Callable[..., object]
    embeds: Callable[[object, str], dict]  # text encoder on CPU -> call kwargs
    call_kwargs: dict


FAMILIES: dict[str, PipelineFamily] = {
    "qwenimage": PipelineFamily("qwenimage", build_qwenimage, _qwenimage_embeds,
                                {"height": 32, "width": 32, "true_cfg_scale": 1.0}),
    "qwenimage21": PipelineFamily(
        "qwenimage21", build_qwenimage21, _qwenimage21_embeds, {"height": 32, "width": 32}),
    "wan": PipelineFamily("wan", build_wan, _wan_embeds,
                          {"height": 16, "width": 16, "num_frames": 5, "guidance_scale": 1.0}),
    "chroma": PipelineFamily("chroma", build_chroma, _chroma_embeds,
                             {"height": 32, "width": 32, "guidance_scale": 1.0}),
}


def save_tiny_pipeline(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    out_dir = Path(out_dir)
    FAMILIES[family].build(seed).save_pretrained(out_dir, safe_serialization=True)
    return out_dir
