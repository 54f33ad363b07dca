"""Tiny random pipelines, built locally (nothing is downloaded), for tests, examples and benchmarks.

Each builder returns a complete pipeline — tiny transformer, tiny VAE, tiny text encoder(s) and their
tokenizer / processor, scheduler — with the transformer's heads divisible by 2 so TP=2 applies, and
``save_tiny_pipeline(family, out_dir)`` writes it with ``save_pretrained`` (safetensors), loadable
with ``<Pipeline>.from_pretrained(out_dir)``. ``FAMILIES`` also says how each pipeline is called with
embeddings computed on CPU (the text encoder stays on CPU, as in ``scripts/diffusers_tp_example.py``)
and without classifier-free guidance. One module per family.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from hf_neuron.testing.tiny_pipelines import (
    chroma,
    cogview4,
    flux,
    flux2,
    hunyuanvideo,
    ltx,
    pixart,
    qwenimage,
    sana,
    sd3,
    wan,
)
from hf_neuron.testing.tiny_pipelines.common import _EXTRA_TOKENS, _tokenizer  # noqa: F401  (tests build on them)
from hf_neuron.testing.tiny_pipelines.qwenimage import build_qwen3vl_processor, build_qwenimage21  # noqa: F401


@dataclasses.dataclass(frozen=True)
class PipelineFamily:
    name: str
    transformer: str  # the transformer class the pipeline denoises with
    build: Callable[..., object]
    embeds: Callable[[object, str], dict]  # text encoder on CPU -> call kwargs
    call_kwargs: dict


FAMILIES: dict[str, PipelineFamily] = {family.name: family for family in (
    PipelineFamily("qwenimage", "QwenImageTransformer2DModel",
                   qwenimage.build_qwenimage, qwenimage._qwenimage_embeds, qwenimage.QWENIMAGE_CALL_KWARGS),
    PipelineFamily("qwenimage21", "QwenImage21Transformer2DModel",
                   qwenimage.build_qwenimage21, qwenimage._qwenimage21_embeds, qwenimage.QWENIMAGE21_CALL_KWARGS),
    PipelineFamily("wan", "WanTransformer3DModel",
                   wan.build_wan, wan._wan_embeds, wan.CALL_KWARGS),
    PipelineFamily("chroma", "ChromaTransformer2DModel",
                   chroma.build_chroma, chroma._chroma_embeds, chroma.CALL_KWARGS),
    PipelineFamily("flux", "FluxTransformer2DModel",
                   flux.build_flux, flux._flux_embeds, flux.CALL_KWARGS),
    PipelineFamily("flux2", "Flux2Transformer2DModel",
                   flux2.build_flux2, flux2._flux2_embeds, flux2.CALL_KWARGS),
    PipelineFamily("sd3", "SD3Transformer2DModel",
                   sd3.build_sd3, sd3._sd3_embeds, sd3.CALL_KWARGS),
    PipelineFamily("ltx", "LTXVideoTransformer3DModel",
                   ltx.build_ltx, ltx._ltx_embeds, ltx.CALL_KWARGS),
    PipelineFamily("hunyuanvideo", "HunyuanVideoTransformer3DModel",
                   hunyuanvideo.build_hunyuanvideo, hunyuanvideo._hunyuanvideo_embeds, hunyuanvideo.CALL_KWARGS),
    PipelineFamily("sana", "SanaTransformer2DModel",
                   sana.build_sana, sana._sana_embeds, sana.CALL_KWARGS),
    PipelineFamily("cogview4", "CogView4Transformer2DModel",
                   cogview4.build_cogview4, cogview4._cogview4_embeds, cogview4.CALL_KWARGS),
    PipelineFamily("pixart", "PixArtTransformer2DModel",
                   pixart.build_pixart, pixart._pixart_embeds, pixart.CALL_KWARGS),
)}


def save_tiny_pipeline(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    out_dir = Path(out_dir)
    FAMILIES[family].build(seed).save_pretrained(out_dir, safe_serialization=True)
    return out_dir
