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

    ``config``: overrides for the generic shrink (nested dicts for sub-configs), or a function returning
    them (when building them imports Transformers). ``tokens``: config key
    of a placeholder id (or a reserved id the config does not name) -> the token name its processor looks
    up, or ``(name, tokenizer attribute)`` for a processor that reads it from the tokenizer
    (``tokenizer.image_token``). ``processor``: builds the processor
    from the tiny config and the tiny tokenizer. ``image_sizing``: how the processor sizes an image,
    which is how image sizes are bucketed (one vision-tower graph per distinct processed size).
    """

    config: dict[str, Any] | Callable[[], dict[str, Any]]
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
        try:
            return getattr(transformers, processor_class)(
                image_processor=images, tokenizer=tokenizer,
                image_seq_len=(size // patch) ** 2 // config.scale_factor ** 2, **videos)
        except ImportError as exc:  # SmolVLM's processor imports num2words
            raise TinyModelError(f"{processor_class} cannot be built here: {exc} (pip install num2words)") from exc

    return build


#: GLM-4V's resize counts the temporal patch (2 frames) in its pixel budget: 2 x 32x32 to 2 x 64x64 tiny.
GLM4V_MIN_PIXELS, GLM4V_MAX_PIXELS = 2 * IMAGE_SIZE * IMAGE_SIZE, 2 * (2 * IMAGE_SIZE) ** 2


def _glm4v_processor(config, tokenizer):
    from transformers import Glm4vImageProcessorPil, Glm4vProcessor

    vision = config.vision_config
    sizes = {"patch_size": vision.patch_size, "merge_size": vision.spatial_merge_size,
             "temporal_patch_size": vision.temporal_patch_size}
    images = Glm4vImageProcessorPil(**sizes, size={"shortest_edge": GLM4V_MIN_PIXELS, "longest_edge": GLM4V_MAX_PIXELS})
    return Glm4vProcessor(image_processor=images, tokenizer=tokenizer,
                          video_processor=_video_processor("Glm4vVideoProcessor", **sizes))


#: Kimi-K2.5's resize caps the patches a side and in all (512 and 16384 released): a 64x64-pixel image tiny.
KIMI_MAX_SIDE = 2 * IMAGE_SIZE // PATCH_SIZE


def _kimi_k25_processor(config, tokenizer):
    from transformers import Kimi_K25ImageProcessor, Kimi_K25Processor

    vision = config.vision_config
    sizes = {"patch_size": vision.patch_size, "merge_size": vision.merge_kernel_size[0],
             "max_patches": KIMI_MAX_SIDE ** 2, "size": {"max_height": KIMI_MAX_SIDE, "max_width": KIMI_MAX_SIDE}}
    return Kimi_K25Processor(image_processor=Kimi_K25ImageProcessor(**sizes), tokenizer=tokenizer,
                             video_processor=_video_processor("Kimi_K25VideoProcessor", **sizes))


#: Muse Glimmer's cap of merged tokens per image (4096 released): a 64x64-pixel image of 16-pixel tokens tiny.
MUSE_MAX_IMAGE_TOKENS = (2 * IMAGE_SIZE // (2 * PATCH_SIZE)) ** 2


def _muse_glimmer_processor(config, tokenizer):
    from transformers import MuseGlimmerImageProcessor, MuseGlimmerProcessor

    vision = config.vision_config
    sizes = {"patch_size": vision.patch_size, "merge_size": vision.merge_size,
             "temporal_patch_size": vision.patch_temporal}
    videos = _video_processor("MuseGlimmerVideoProcessor", **sizes, max_video_frame_tokens=MUSE_MAX_IMAGE_TOKENS)
    return MuseGlimmerProcessor(image_processor=MuseGlimmerImageProcessor(**sizes, max_image_tokens=MUSE_MAX_IMAGE_TOKENS),
                                video_processor=videos, tokenizer=tokenizer)


def _gemma4_vision() -> dict:
    """Gemma 4's default config has no vision tower (its text-only release): Gemma4VisionConfig's defaults
    through the generic shrink, 8x8 patches pooled 2x2 (16-pixel patches pooled 3x3 released)."""
    from transformers import Gemma4VisionConfig

    # The position table is indexed by a patch's row and column: at most every patch of an image in a row.
    sizes = {"patch_size": PATCH_SIZE, "pooling_kernel_size": 2, "position_embedding_size": GEMMA4_SOFT_TOKENS * 4}
    return {"vision_config": _shrink_level(Gemma4VisionConfig, Gemma4VisionConfig(), tok.VOCAB_SIZE, sizes,
                                    nested=True).to_dict()}


#: The smallest soft-token budget Gemma 4's processor accepts (70, 140, 280, 560 or 1120; 280 released).
GEMMA4_SOFT_TOKENS = 70


def _gemma4_processor(config, tokenizer):
    from transformers import Gemma4AudioFeatureExtractor, Gemma4ImageProcessorPil, Gemma4Processor

    vision = config.vision_config
    sizes = {"patch_size": vision.patch_size, "pooling_kernel_size": vision.pooling_kernel_size,
             "max_soft_tokens": GEMMA4_SOFT_TOKENS}
    return Gemma4Processor(feature_extractor=Gemma4AudioFeatureExtractor(), image_processor=Gemma4ImageProcessorPil(**sizes),
                           tokenizer=tokenizer, video_processor=_video_processor("Gemma4VideoProcessor", **sizes),
                           image_seq_length=GEMMA4_SOFT_TOKENS)


def _llama4_processor(config, tokenizer):
    from transformers import Llama4ImageProcessor, Llama4Processor

    vision = config.vision_config
    images = Llama4ImageProcessor(size={"height": vision.image_size, "width": vision.image_size}, max_patches=4)
    return Llama4Processor(image_processor=images, tokenizer=tokenizer, patch_size=vision.patch_size,
                           pixel_shuffle_ratio=vision.pixel_shuffle_ratio)


def _mllama_processor(config, tokenizer):
    from transformers import MllamaImageProcessorPil, MllamaProcessor

    size = config.vision_config.image_size
    images = MllamaImageProcessorPil(size={"height": size, "width": size},
                                     max_image_tiles=config.vision_config.max_num_tiles)
    return MllamaProcessor(image_processor=images, tokenizer=tokenizer)


#: Florence-2's tower downsamples 32x over 4 stages: a 64-pixel image (768 released) gives 2x2 features.
FLORENCE2_IMAGE_SIZE = 2 * IMAGE_SIZE


def _florence2_processor(config, tokenizer):
    from transformers import CLIPImageProcessorPil, Florence2Processor

    size = FLORENCE2_IMAGE_SIZE
    images = CLIPImageProcessorPil(size={"height": size, "width": size}, crop_size={"height": size, "width": size},
                                   do_center_crop=False)
    images.image_seq_length = (size // 32) ** 2 + 1  # a feature per cell plus the pooled one (577 released)
    return Florence2Processor(image_processor=images, tokenizer=tokenizer)


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
    "glm4v": VisionRecipe(
        # A 4x4 learnt position table (24x24 released), resampled to each grid. The text config leaves the
        # M-RoPE sections to the modeling default, sized for a 128-wide head: the tiny 16-wide head at a
        # partial rotary factor of 0.5 rotates 4 pairs (time, height, width).
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
                "text_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                    "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}}},
        tokens={"image_token_id": ("<|image|>", "image_token"), "video_token_id": ("<|video|>", "video_token"),
                "image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
                "video_start_token_id": "<|begin_of_video|>", "video_end_token_id": "<|end_of_video|>"},
        processor=_glm4v_processor,
        image_sizing="dynamic resolution: resized to multiples of patch x merge (28 released, 16 tiny) within a "
                     "pixel budget counting 2 frames, keeping the aspect ratio",
        image_placeholder="<|begin_of_image|><|image|><|end_of_image|>",
    ),
    "kimi_k25": VisionRecipe(
        # A 4x4 learnt position grid (64x64 released), resampled to each image's grid.
        config={"vision_config": {"patch_size": PATCH_SIZE, "pos_emb_height": IMAGE_SIZE // PATCH_SIZE,
                                  "pos_emb_width": IMAGE_SIZE // PATCH_SIZE}},
        tokens={"image_token_id": ("<|media_pad|>", "image_token"),
                "video_token_id": ("<|kimi_k25_video_placeholder|>", "video_token"),
                "vision_start_token_id": "<|media_begin|>", "vision_end_token_id": "<|media_end|>",
                9: "<|media_content|>"},
        processor=_kimi_k25_processor,
        image_sizing="NaViT: never upscaled, shrunk to a patch budget (16384 patches, 512 a side released; 64 and 8 "
                     "tiny), padded to multiples of patch x merge (28 released, 16 tiny)",
        image_placeholder="<|media_begin|>image<|media_content|><|media_pad|><|media_end|>",
        needs_torchvision=True,  # its image processor is torchvision-backed only
    ),
    "muse_glimmer": VisionRecipe(
        # The merge folds 2x2 patches into the channels: out_hidden_size is 4 vision widths. A 4x4 position
        # grid, which is also the attention window (32x32 released).
        config={"vision_config": {"patch_size": PATCH_SIZE, "pos_emb_height": IMAGE_SIZE // PATCH_SIZE,
                                  "pos_emb_width": IMAGE_SIZE // PATCH_SIZE,
                                  "max_position_embeddings": (IMAGE_SIZE // PATCH_SIZE) ** 2},
                "out_hidden_size": 4 * 64},
        # The processor finds its tokens by name (two config ids, the rest on reserved ids).
        tokens={"image_token_id": "<|patch|>", "video_token_id": "<|video|>", 7: "<|image_start|>",
                8: "<|image_end|>", 9: "<|vid_start|>", 10: "<|vid_end|>", 11: "<|vid_frame_separator|>"},
        processor=_muse_glimmer_processor,
        image_sizing="dynamic resolution: resized (up or down) to the grid of patch x merge (28 released, 16 tiny) "
                     "closest to the aspect ratio within a cap of merged tokens (4096 released, 16 tiny)",
        image_placeholder="<|patch|>",  # the processor wraps it in <|image_start|>...<|image_end|>
        needs_torchvision=True,  # its image processor is torchvision-backed only
    ),
    "smolvlm": VisionRecipe(
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE}},
        tokens=_TILING_TOKENS,
        processor=_tiling_processor("SmolVLMProcessor", "SmolVLMImageProcessorPil", "SmolVLMVideoProcessor"),
        image_sizing=_TILING_SIZING,
    ),
    "gemma4": VisionRecipe(
        config=_gemma4_vision,
        # The processor reads every marker from the tokenizer, the audio ones too (it refuses any prompt
        # without them), and adds "<|video|>" unless the vocabulary has it.
        tokens={"boi_token_id": ("<|image>", "boi_token"), "eoi_token_id": ("<image|>", "eoi_token"),
                "image_token_id": ("<|image|>", "image_token"), "video_token_id": "<|video|>",
                "boa_token_id": ("<|audio>", "boa_token"), "eoa_token_index": ("<audio|>", "eoa_token"),
                "audio_token_id": ("<|audio|>", "audio_token")},
        processor=_gemma4_processor,
        image_sizing="aspect-ratio resize to a patch budget, patches padded to it: 280 soft tokens of 3x3 16-pixel "
                     "patches released (70 of 2x2 8-pixel patches tiny)",
        image_placeholder="<|image|>",
    ),
    "llama4": VisionRecipe(
        # The default vision config does not fit together (releases set it): the pixel-shuffle MLP reads
        # hidden / ratio**2 channels and the projector reads the tower's output width.
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "hidden_size": 64,
                                  "intermediate_size": 256, "projector_input_dim": 64, "projector_output_dim": 64,
                                  "vision_output_dim": 64}},
        # The prompt's <|image|> expands to the tiles' <|patch|> tokens (the config's image token) with separators.
        tokens={"boi_token_index": "<|image_start|>", "eoi_token_index": "<|image_end|>",
                "image_token_index": "<|patch|>", 8: "<|image|>", 9: "<|tile_x_separator|>",
                10: "<|tile_y_separator|>"},
        processor=_llama4_processor,
        image_sizing="tiles of 336 released (32 tiny) on the best-fitting canvas of up to 16 tiles (4 tiny), plus a "
                     "global tile when there are several",
        image_placeholder="<|image|>",
        needs_torchvision=True,  # its image processor is torchvision-backed only
    ),
    "mllama": VisionRecipe(
        # The layer-index lists default to the release's (vision layers 3..30, cross-attention 3..38): the
        # tiny layers instead; the tower's output is its width times (1 + intermediate layers).
        config={"vision_config": {"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "max_num_tiles": 4,
                                  "intermediate_layers_indices": [0, 1], "vision_output_dim": 3 * 64},
                "text_config": {"cross_attention_layers": [1]}},
        tokens={"image_token_index": ("<|image|>", "image_token")},
        processor=_mllama_processor,
        image_sizing="tiles of 560 released (32 tiny) on the best-fitting canvas of up to 4 tiles, padded to 4",
        image_placeholder="<|image|>",
    ),
    "florence2": VisionRecipe(
        # Per-stage tuples the generic shrink does not know: one block per stage, 32-64 wide. window_size is
        # the tower's window (12 released), the position table covers the 2x2 grid; a wider init than the
        # default 0.02 gives tokens that depend on the image (the tiny decoder otherwise echoes its start).
        config={"vision_config": {"depths": [1, 1, 1, 1], "embed_dim": [32, 32, 64, 64], "num_heads": [2, 2, 4, 4],
                                  "num_groups": [2, 2, 4, 4], "window_size": 2, "max_position_embeddings": 8,
                                  "projection_dim": 64, "drop_path_rate": 0.0, "initializer_range": 0.5},
                "text_config": {"init_std": 0.5}},
        tokens={"image_token_id": ("<image>", "image_token")},
        processor=_florence2_processor,
        image_sizing="fixed square: resize to 768x768 released (64x64 tiny), no crop",
        image_placeholder="",  # the processor puts the image tokens before the prompt itself
    ),
    "qwen2_vl": _qwen_vl("Qwen2VLProcessor", "Qwen2VLVideoProcessor", {"embed_dim": 64}, _QWEN2_TEXT),
    "qwen2_5_vl": _qwen_vl("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor",
                           {"fullatt_block_indexes": [1], "window_size": 32}, _QWEN2_TEXT),
    "qwen3_vl": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {"deepstack_visual_indexes": [1]}),
    "qwen3_vl_moe": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {"deepstack_visual_indexes": [1]}),
    "qwen3_5": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {}),
    "qwen3_5_moe": _qwen_vl("Qwen3VLProcessor", "Qwen3VLVideoProcessor", {}),
}


#: Ranked types without a tiny recipe, and why.
NO_RECIPE_BECAUSE = {
    "gemma3n": "its vision tower is timm's MobileNetV5 (needs the timm package, and its sizes are timm arguments the "
               "tiny shrink cannot reach); Transformers 5.25's chunked prefill also fails on its image output "
               "(TimmWrapperModelOutput rebuilt without last_hidden_state)",
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
    if model_type in NO_RECIPE_BECAUSE:
        raise TinyModelError(f"no tiny image-text-to-text recipe for {model_type!r}: {NO_RECIPE_BECAUSE[model_type]}")
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise TinyModelError(
            f"no tiny image-text-to-text recipe for {model_type!r} yet (its processor must be sized to match "
            f"a tiny vision tower): the types with one are {', '.join(vision_model_types())}")
    raise TinyModelError(f"{model_type!r} is not an image-text-to-text model_type of the installed transformers")


def tiny_vision_config(model_type: str):
    """The tiny composite config of `model_type` (text decoder and vision tower shrunk together)."""
    recipe = vision_recipe(model_type)
    defaults = default_config(model_type)
    overrides = recipe.config() if callable(recipe.config) else recipe.config
    config = _shrink_level(type(defaults), defaults, tok.VOCAB_SIZE, dict(overrides))
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


def float32_pixels(inputs):
    """``inputs`` (a processor's output) with floating tensors in float32, the tiny models' dtype: Llama 4's
    processor returns bfloat16 pixels, the released model's dtype."""
    import torch

    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32:
            inputs[key] = value.float()
    return inputs


def random_image(height: int, width: int, *, seed: int = 0):
    """A deterministic RGB ``PIL.Image`` of random pixels (tests and examples send these)."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)
