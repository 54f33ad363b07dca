"""``_repeated_blocks`` for block-structured diffusers classes that upstream leaves without one.

``ModelMixin.compile_repeated_blocks`` (regional compilation) compiles every submodule whose class
name is listed in ``_repeated_blocks``; with an empty list it raises. Each entry here is installed as
the named fix ``diffusers.repeated_blocks.<Class>`` only while upstream's list is empty.
"""

from __future__ import annotations

import logging

from hf_neuron._import_hooks import when_imported
from hf_neuron.diffusers._plan_registry import TRANSFORMERS_PACKAGE, class_assigns
from hf_neuron.fixes import fix, mark_closed

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


def _install(module, class_name: str, blocks: tuple[str, ...]) -> None:
    fix_name = f"diffusers.repeated_blocks.{class_name}"
    cls = getattr(module, class_name, None)
    if cls is None:
        mark_closed(fix_name, "class not found in its module")
        return
    if getattr(cls, "_repeated_blocks", None):
        if _INSTALLED.get(class_name) is None:
            mark_closed(fix_name, "upstream sets _repeated_blocks: ours not installed")
        return
    cls._repeated_blocks = list(blocks)
    _INSTALLED[class_name] = tuple(blocks)


def _register(class_name: str, module: str, blocks: tuple[str, ...]) -> None:
    module_path = f"{TRANSFORMERS_PACKAGE}.{module}"

    def detect() -> bool:
        return class_assigns(module_path, class_name, "_repeated_blocks") is False

    def apply() -> None:
        when_imported(module_path, lambda mod: _install(mod, class_name, blocks))

    apply.__doc__ = (
        f"diffusers leaves {class_name}._repeated_blocks empty, so `compile_repeated_blocks` raises; hf_neuron "
        f"lists its block classes {list(blocks)}.\n\n"
        f"Detected from the class body (no list assigned) and again on import: installed only while the "
        f"attribute is empty, so a list upstream ships later wins."
    )
    fix(f"diffusers.repeated_blocks.{class_name}", "diffusers", detect)(apply)


for _name, (_module, _blocks) in REPEATED_BLOCKS.items():
    _register(_name, _module, _blocks)
