"""Qwen-Image and Qwen-Image-2.1 (upstream TP plans and repeated blocks), 32x32 images."""

from __future__ import annotations

import torch

from hf_neuron.testing.tiny_pipelines.common import _EXTRA_TOKENS, _tokenizer, _vision_token_ids


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
    from hf_neuron.transformers.loading.processors import FIX, video_processor_class

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


QWENIMAGE_CALL_KWARGS = {"height": 32, "width": 32, "true_cfg_scale": 1.0}
QWENIMAGE21_CALL_KWARGS = {"height": 32, "width": 32}
