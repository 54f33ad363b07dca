"""Tiny image-text-to-text checkpoints with their processor, built offline.

A vision-language checkpoint is more than weights: the processor resizes an image to what the vision
tower takes and expands the prompt's image placeholder into as many tokens as the tower gives features.
Both must agree with the config, so each architecture has a :class:`VisionRecipe`: the image size and
patch size of its tiny vision tower, and how its processor is built from its own image-processor class
(sized to match) and the tiny tokenizer, whose reserved ids carry the placeholder names the processor
looks up (``<image>`` at the config's ``image_token_index``).

``save_tiny_vision_model("llava", out_dir)`` writes a checkpoint that ``AutoModelForImageTextToText``
and ``AutoProcessor`` load offline.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Callable

from . import tokenizer as tok
from .configs import TinyModelError, _shrink_level, default_config
from .factory import MAX_PARAMETERS, _progress_bars_off

#: The tiny vision tower's input: 32x32 pixels in 8x8 patches (16 patches per image).
IMAGE_SIZE = 32
PATCH_SIZE = 8


@dataclasses.dataclass(frozen=True)
class VisionRecipe:
    """How to build one architecture's tiny checkpoint and processor.

    ``config``: overrides for the generic shrink (nested dicts for sub-configs). ``tokens``: config key
    of a placeholder id (or a reserved id the config does not name) -> the token name its processor looks
    up, or ``(name, tokenizer attribute)`` for a processor that reads it from the tokenizer
    (``tokenizer.image_token``). ``processor``: builds the processor
    from the tiny config and the tiny tokenizer. ``image_sizing``: how the processor sizes an image,
    which is how image sizes are bucketed (one vision-tower graph per distinct processed size).
    """

    config: dict[str, Any]
    tokens: dict[str | int, str | tuple[str, str]]
    processor: Callable[[Any, Any], Any]
    image_sizing: str
    #: What a prompt writes where its image goes ("" when the processor puts the image tokens itself).
    image_placeholder: str = "<image>"
    #: The processor itself is torchvision-backed (Pixtral's): it cannot be built without torchvision.
    needs_torchvision: bool = False

    def prompt(self, text: str) -> str:
        """`text` with one image before it, as this architecture's processor expects."""
        return self.image_placeholder + text


def _video_processor(class_name: str, **settings):
    """The video processor a processor requires (for prompts with images too). Transformers' video processors
    need torchvision: without it, the settings-only stand-in hf_neuron loads such checkpoints with."""
    import transformers

    try:
        return getattr(transformers, class_name)(**settings)
    except ImportError:
        from hf_neuron.transformers.loading.processors import video_processor_class as stand_in

        return stand_in()(video_processor_type=class_name, **settings)


def _llava_processor(config, tokenizer):
    from transformers import LlavaImageProcessorPil, LlavaProcessor

    size = config.vision_config.image_size
    images = LlavaImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=config.vision_config.patch_size,
                          vision_feature_select_strategy=config.vision_feature_select_strategy,
                          image_token="<image>", num_additional_image_tokens=1)  # CLIP's class token


def _gemma3_processor(config, tokenizer):
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    size = config.vision_config.image_size
    images = Gemma3ImageProcessorPil(size={"height": size, "width": size})
    return Gemma3Processor(image_processor=images, tokenizer=tokenizer, image_seq_length=config.mm_tokens_per_image)


def _paligemma_processor(config, tokenizer):
    from transformers import PaliGemmaProcessor, SiglipImageProcessorPil

    size = config.vision_config.image_size
    images = SiglipImageProcessorPil(size={"height": size, "width": size})
    images.image_seq_length = (size // config.vision_config.patch_size) ** 2
    return PaliGemmaProcessor(image_processor=images, tokenizer=tokenizer)


#: Qwen-VL processors: the image is resized to multiples of patch x merge (16 tiny) within a pixel budget.
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 32 * 32, 64 * 64


def _qwen_vl_processor(processor_class: str, video_processor_class: str):
    def build(config, tokenizer):
        import transformers
        from transformers import Qwen2VLImageProcessorPil

        vision = config.vision_config
        sizes = {"patch_size": vision.patch_size, "merge_size": vision.spatial_merge_size,
                 "temporal_patch_size": vision.temporal_patch_size}
        images = Qwen2VLImageProcessorPil(**sizes, size={"shortest_edge": QWEN_MIN_PIXELS,
                                                         "longest_edge": QWEN_MAX_PIXELS})
        videos = _video_processor(video_processor_class, **sizes)
        try:
            return getattr(transformers, processor_class)(image_processor=images, tokenizer=tokenizer,
                                                          video_processor=videos)
        except (ImportError, AttributeError, TypeError) as exc:
            raise TinyModelError(
                f"{processor_class} cannot be built here ({type(exc).__name__}: {exc}): it needs torchvision, or a "
                "neuron device (where hf_neuron's video-processor-without-torchvision fix builds it without)") from exc

    return build


_QWEN_TOKENS = {"image_token_id": ("<|image_pad|>", "image_token"), "video_token_id": ("<|video_pad|>", "video_token"),
                "vision_start_token_id": ("<|vision_start|>", "vision_start_token"),
                "vision_end_token_id": ("<|vision_end|>", "vision_end_token")}
_QWEN_SIZING = ("dynamic resolution: resized to multiples of patch x merge (28 or 32 released, 16 tiny) within a "
                "pixel budget, keeping the aspect ratio")
_QWEN_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
# Qwen2-VL's and Qwen2.5-VL's configs leave the multimodal RoPE sections to the modeling code's default,
# sized for a 128-wide head: the tiny 16-wide head takes 8 rotary pairs (time, height, width).
_QWEN2_TEXT = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}}


def _qwen_vl(processor_class: str, video_processor_class: str, vision: dict, text: dict | None = None) -> VisionRecipe:
    config = {"vision_config": {"patch_size": PATCH_SIZE, **vision}, **({"text_config": text} if text else {})}
    return VisionRecipe(config=config, tokens=_QWEN_TOKENS,
                        processor=_qwen_vl_processor(processor_class, video_processor_class), image_sizing=_QWEN_SIZING,
                        image_placeholder=_QWEN_PLACEHOLDER)


def _llava_next_processor(config, tokenizer):
    from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor

    size = config.vision_config.image_size
    images = LlavaNextImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                        image_grid_pinpoints=config.image_grid_pinpoints)
    return LlavaNextProcessor(image_processor=images, tokenizer=tokenizer, patch_size=config.vision_config.patch_size,
                              vision_feature_select_strategy=config.vision_feature_select_strategy,
                              image_token="<image>", num_additional_image_tokens=1)


def _pixtral_processor(config, tokenizer):
    from transformers import PixtralImageProcessorPil, PixtralProcessor

    patch = config.vision_config.patch_size
    images = PixtralImageProcessorPil(patch_size={"height": patch, "width": patch},
                                      size={"longest_edge": config.vision_config.image_size})
    return PixtralProcessor(image_processor=images, tokenizer=tokenizer, patch_size=patch,
                            spatial_merge_size=config.spatial_merge_size, image_token="[IMG]",
                            image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")


def _internvl_processor(config, tokenizer):
    from transformers import GotOcr2ImageProcessorPil, InternVLProcessor

    size = config.vision_config.image_size[0]
    patches = (size // config.vision_config.patch_size[0]) ** 2
    images = GotOcr2ImageProcessorPil(size={"height": size, "width": size}, crop_to_patches=False)
    return InternVLProcessor(image_processor=images, tokenizer=tokenizer,
                             video_processor=_video_processor("InternVLVideoProcessor"),
                             image_seq_length=int(patches * config.downsample_ratio ** 2))


def _tiling_processor(processor_class: str, image_processor_class: str, video_processor_class: str | None):
    """Idefics3 (and SmolVLM, whose processor also needs the num2words package): an image is cut into tiles
    of the tower's size (at most 2x2 tiny) plus a global view, each tile ``image_seq_len`` tokens."""
    def build(config, tokenizer):
        import transformers

        size, patch = config.vision_config.image_size, config.vision_config.patch_size
        images = getattr(transformers, image_processor_class)(
            do_image_splitting=True, size={"longest_edge": 2 * size}, max_image_size={"longest_edge": size})
        videos = {"video_processor": _video_processor(video_processor_class)} if video_processor_class else {}
        return getattr(transformers, processor_class)(
            image_processor=images, tokenizer=tokenizer, image_seq_len=(size // patch) ** 2 // config.scale_factor ** 2,
            **videos)

    return build


_TILING_TOKENS = {"image_token_id": "<image>", 11: "<fake_token_around_image>", 12: "<global-img>",
                  13: "<end_of_utterance>", 14: "<video>"}
_TILING_SIZING = ("tiles of 364 or 512 released (32 tiny), as many as the image's size needs up to a cap, plus a "
                  "global view")


RECIPES: dict[str, VisionRecipe] = {
    "llava": VisionRecipe(
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}},
        tokens={"image_token_index": "<image>"},
        processor=_llava_processor,
        image_sizing="fixed square: resize the shortest edge, centre crop (336x336 released, 32x32 tiny)",
    ),
    "gemma3": VisionRecipe(
        # 4x4 patches pooled to 2x2 soft tokens per image (released: 64x64 patches pooled to 16x16).
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}, "mm_tokens_per_image": 4},
        tokens={"boi_token_index": ("<start_of_image>", "boi_token"), "eoi_token_index": ("<end_of_image>", "eoi_token"),
                "image_token_index": ("<image_soft_token>", "image_token")},
        processor=_gemma3_processor,
        image_sizing="fixed square: resize to 896x896 released (32x32 tiny); pan-and-scan crops off",
        image_placeholder="<start_of_image>",
    ),
    "paligemma": VisionRecipe(
        # The projector maps the tower's features to the text width (the shrink leaves projection_dim alone).
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "projection_dim": 64},
                "projection_dim": 64},
        tokens={"image_token_index": ("<image>", "image_token")},
        processor=_paligemma_processor,
        image_sizing="fixed square: resize to 224, 448 or 896 per checkpoint (32x32 tiny)",
        image_placeholder="",
    ),
    "llava_next": VisionRecipe(
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
                "image_grid_pinpoints": [[IMAGE_SIZE, 2 * IMAGE_SIZE], [2 * IMAGE_SIZE, IMAGE_SIZE],
                                         [2 * IMAGE_SIZE, 2 * IMAGE_SIZE]]},
        tokens={"image_token_index": "<image>"},
        processor=_llava_next_processor,
        image_sizing="anyres: tiles of 336 (32 tiny) on the best-fitting grid of image_grid_pinpoints, plus the "
                     "whole image",
    ),
    "mistral3": VisionRecipe(
        config={"vision_config": {"image_size": 2 * IMAGE_SIZE, "patch_size": PATCH_SIZE}},
        tokens={"image_token_index": "[IMG]", 11: "[IMG_BREAK]", 12: "[IMG_END]"},
        processor=_pixtral_processor,
        image_sizing="dynamic resolution: longest edge capped (1540 released, 64 tiny), multiples of the patch, "
                     "keeping the aspect ratio",
        image_placeholder="[IMG]",
        needs_torchvision=True,
    ),
    "internvl": VisionRecipe(
        config={"vision_config": {"image_size": [IMAGE_SIZE, IMAGE_SIZE], "patch_size": [PATCH_SIZE, PATCH_SIZE]}},
        tokens={"image_token_id": ("<IMG_CONTEXT>", "context_image_token"), 12: ("<img>", "start_image_token"),
                13: ("</img>", "end_image_token"), 14: ("<video>", "video_token")},
        processor=_internvl_processor,
        image_sizing="tiles of 448 (32 tiny), 1 to 12 by aspect ratio, plus a thumbnail (the processor crops to patches)",
        image_placeholder="<IMG_CONTEXT>",
    ),
    "idefics3": VisionRecipe(
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}},
        tokens=_TILING_TOKENS, processor=_tiling_processor("Idefics3Processor", "Idefics3ImageProcessorPil", None),
        image_sizing=_TILING_SIZING,
    ),
    "qwen2_vl": _qwen_vl("Qwen2VLProcessor", "Qwen2VLVideoProcessor", {"embed_dim": 64}, _QWEN2_TEXT),
    "qwen2_5_vl": _qwen_vl("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor",
                           {"fullatt_block_indexes": [1], "window_size": 32}, _QWEN2_TEXT),
    "qwen3_vl": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {"deepstack_visual_indexes": [1]}),
    "qwen3_vl_moe": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {"deepstack_visual_indexes": [1]}),
    "qwen3_5": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {}),
    "qwen3_5_moe": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {}),
}


def torchvision_available() -> bool:
    import importlib

    try:
        importlib.import_module("torchvision")
    except Exception:  # noqa: BLE001 - a wheel built for another torch fails at import with various errors
        return False
    return True


def vision_model_types() -> list[str]:
    """The image-text-to-text types this module builds."""
    return sorted(RECIPES)


def vision_recipe(model_type: str) -> VisionRecipe:
    """The recipe of `model_type`, or :class:`TinyModelError` saying which types have one."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if model_type in RECIPES:
        return RECIPES[model_type]
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise TinyModelError(
            f"no tiny image-text-to-text recipe for {model_type!r} yet (its processor must be sized to match "
            f"a tiny vision tower): the types with one are {', '.join(vision_model_types())}")
    raise TinyModelError(f"{model_type!r} is not an image-text-to-text model_type of the installed transformers")


def tiny_vision_config(model_type: str):
    """The tiny composite config of `model_type` (text decoder and vision tower shrunk together)."""
    recipe = vision_recipe(model_type)
    defaults = default_config(model_type)
    config = _shrink_level(type(defaults), defaults, tok.VOCAB_SIZE, dict(recipe.config))
    return config


def _named_tokens(config, recipe: VisionRecipe) -> tuple[dict[int, str], dict[str, str]]:
    """``(reserved id -> token name, tokenizer attribute -> token name)`` for the recipe's placeholders."""
    named, attributes = {}, {}
    for key, token in recipe.tokens.items():
        name, attribute = (token, None) if isinstance(token, str) else token
        token_id = key if isinstance(key, int) else getattr(config, key, None)
        if not isinstance(token_id, int):
            raise TinyModelError(f"tiny {config.model_type!r} config has no integer {key!r} for {name!r}")
        named[token_id] = name
        if attribute:
            attributes[attribute] = name
    return named, attributes


def tiny_vision_model(model_type: str, *, seed: int = 0):
    """``(model, processor)`` in memory: a tiny random image-text-to-text model (CPU, eval mode)."""
    import torch
    import transformers

    recipe = vision_recipe(model_type)
    if recipe.needs_torchvision and not torchvision_available():
        raise TinyModelError(f"{model_type}'s processor needs torchvision, which is not importable here: install a "
                             "torchvision built for the installed torch")
    config = tiny_vision_config(model_type)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in transformers.AutoModelForImageTextToText.from_config(config).parameters())
    if n_params > MAX_PARAMETERS:
        raise TinyModelError(f"tiny {model_type!r} would have {n_params:,} parameters (> {MAX_PARAMETERS:,}): "
                             f"shrink more in its recipe in hf_neuron/tiny_models/vision.py")
    named, attributes = _named_tokens(config, recipe)
    tokenizer = tok.build_tokenizer(named=named, attributes=attributes)
    processor = recipe.processor(config, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    gen = model.generation_config
    gen.pad_token_id, gen.bos_token_id, gen.eos_token_id = tok.PAD_TOKEN_ID, tok.BOS_TOKEN_ID, tok.EOS_TOKEN_ID
    return model.eval(), processor


def save_tiny_vision_model(model_type: str, out_dir, *, seed: int = 0) -> pathlib.Path:
    """Write a tiny `model_type` checkpoint and its processor to `out_dir`; returns the directory."""
    out = pathlib.Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TinyModelError(f"{out} exists and is not a directory: choose a directory for the tiny model")
    model, processor = tiny_vision_model(model_type, seed=seed)  # everything that can fail, before writing
    out.mkdir(parents=True, exist_ok=True)
    with _progress_bars_off():
        model.save_pretrained(out)
    processor.save_pretrained(out)
    info = {"model_type": model_type, "model_class": type(model).__name__, "auto_class": "AutoModelForImageTextToText",
            "processor_class": type(processor).__name__, "image_sizing": vision_recipe(model_type).image_sizing,
            "seed": seed, "parameters": sum(p.numel() for p in model.parameters()),
            "tokenizer_fingerprint": tok.tokenizer_fingerprint()}
    (out / "tiny_model.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


def random_image(height: int, width: int, *, seed: int = 0):
    """A deterministic RGB ``PIL.Image`` of random pixels (tests and examples send these)."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)
