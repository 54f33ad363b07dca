"""``_repeated_blocks`` for block-structured diffusers classes that upstream leaves without one.

``ModelMixin.compile_repeated_blocks`` (regional compilation) compiles every submodule whose class
name is listed in ``_repeated_blocks``; with an empty list it raises. Each entry here is installed as
the named fix ``diffusers.repeated_blocks.<Class>`` only while upstream's list is empty.
"""

from __future__ import annotations

import logging

from hf_neuron.patching.class_attributes import supply_class_attribute
from hf_neuron.diffusers.plan_registry import TRANSFORMERS_PACKAGE

logger = logging.getLogger("hf_neuron")

# class -> (module under diffusers.models.transformers, block class names). The blocks are the
# elements of the class's ModuleLists; a wrapper that only delegates (HiDreamBlock) is replaced by
# the classes it wraps, so that each distinct block structure is one graph.
REPEATED_BLOCKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "AceStepTransformer1DModel": ("ace_step_transformer", ("AceStepTransformerBlock",)),
    "AllegroTransformer3DModel": ("transformer_allegro", ("AllegroTransformerBlock",)),
    "AuraFlowTransformer2DModel": (
        "auraflow_transformer_2d", ("AuraFlowJointTransformerBlock", "AuraFlowSingleTransformerBlock"),
    ),
    "BriaTransformer2DModel": ("transformer_bria", ("BriaTransformerBlock", "BriaSingleTransformerBlock")),
    "CogVideoXTransformer3DModel": ("cogvideox_transformer_3d", ("CogVideoXBlock",)),
    "CogView3PlusTransformer2DModel": ("transformer_cogview3plus", ("CogView3PlusTransformerBlock",)),
    "CogView4Transformer2DModel": ("transformer_cogview4", ("CogView4TransformerBlock",)),
    "ConsisIDTransformer3DModel": ("consisid_transformer_3d", ("ConsisIDBlock",)),
    "CosmosTransformer3DModel": ("transformer_cosmos", ("CosmosTransformerBlock",)),
    "DiTTransformer2DModel": ("dit_transformer_2d", ("BasicTransformerBlock",)),
    "DreamLiteTransformer2DModel": ("transformer_2d_dreamlite", ("BasicTransformerBlockDreamLite",)),
    "EasyAnimateTransformer3DModel": ("transformer_easyanimate", ("EasyAnimateTransformerBlock",)),
    "HiDreamImageTransformer2DModel": (
        "transformer_hidream_image", ("HiDreamImageTransformerBlock", "HiDreamImageSingleTransformerBlock"),
    ),
    "HunyuanDiT2DModel": ("hunyuan_transformer_2d", ("HunyuanDiTBlock",)),
    "HunyuanVideoFramepackTransformer3DModel": (
        "transformer_hunyuan_video_framepack",
        ("HunyuanVideoTransformerBlock", "HunyuanVideoSingleTransformerBlock", "HunyuanVideoTokenRefiner"),
    ),
    "LatteTransformer3DModel": ("latte_transformer_3d", ("BasicTransformerBlock",)),
    "Lumina2Transformer2DModel": ("transformer_lumina2", ("Lumina2TransformerBlock",)),
    "LuminaNextDiT2DModel": ("lumina_nextdit2d", ("LuminaNextDiTBlock",)),
    "MiniMaxMusic3RVQDepthDecoder": ("minimax_music3_rvq_depth_decoder", ("MiniMaxMusic3DepthDecoderBlock",)),
    "MochiTransformer3DModel": ("transformer_mochi", ("MochiTransformerBlock",)),
    "OmniGenTransformer2DModel": ("transformer_omnigen", ("OmniGenBlock",)),
    "PRXTransformer2DModel": ("transformer_prx", ("PRXBlock",)),
    "PixArtTransformer2DModel": ("pixart_transformer_2d", ("BasicTransformerBlock",)),
    "PriorTransformer": ("prior_transformer", ("BasicTransformerBlock",)),
    "SanaTransformer2DModel": ("sana_transformer", ("SanaTransformerBlock",)),
    "SanaVideoTransformer3DModel": ("transformer_sana_video", ("SanaVideoTransformerBlock",)),
    "SD3Transformer2DModel": ("transformer_sd3", ("JointTransformerBlock",)),
    "StableAudioDiTModel": ("stable_audio_transformer", ("StableAudioDiTBlock",)),
    "T5FilmDecoder": ("t5_film_transformer", ("DecoderLayer",)),
    "Transformer2DModel": ("transformer_2d", ("BasicTransformerBlock",)),
    "TransformerTemporalModel": ("transformer_temporal", ("BasicTransformerBlock",)),
}

_INSTALLED: dict[str, tuple[str, ...]] = {}


def installed_repeated_blocks() -> dict[str, tuple[str, ...]]:
    """Classes whose ``_repeated_blocks`` hf_neuron installed, with their block classes."""
    return dict(_INSTALLED)


def _register(class_name: str, module: str, blocks: tuple[str, ...]) -> None:
    supply_class_attribute(
        f"diffusers.repeated_blocks.{class_name}",
        f"{TRANSFORMERS_PACKAGE}.{module}",
        class_name,
        "_repeated_blocks",
        lambda: list(blocks),
        f"diffusers leaves {class_name}._repeated_blocks empty, so `compile_repeated_blocks` raises; hf_neuron "
        f"lists its block classes {list(blocks)}.",
        lambda _value: _INSTALLED.__setitem__(class_name, tuple(blocks)),
    )


for _name, (_module, _blocks) in REPEATED_BLOCKS.items():
    _register(_name, _module, _blocks)
