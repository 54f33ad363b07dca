"""diffusers transformer classes without a tensor-parallel plan (upstream's or hf_neuron's), and why.

``UNSHARDABLE`` lists the classes the colwise/rowwise mechanism does not fit; ``NOT_COVERED_YET``
lists the ones it fits but for which no plan has been written and proven yet (the same rules as
:mod:`hf_neuron.diffusers.tp_plans` apply). The error for a class without a plan quotes the reason.
``compatibility/diffusers.md`` publishes both tables.
"""

from __future__ import annotations

UNSHARDABLE: dict[str, str] = {
    "TransformerTemporalModel": (
        "a temporal sub-module inside the video UNets, not a pipeline's denoiser: sharding it alone leaves the "
        "UNet's convolutions replicated, and its width (UNet channels, 64-wide heads) is too small for the "
        "all-reduces to pay off"
    ),
    "MiniMaxMusic3RVQDepthDecoder": (
        "a small depth decoder run once per audio frame inside the MiniMax Music 3 sampler: its width does not "
        "pay for two all-reduces per layer"
    ),
    "RFD4ProteinaTransformer": (
        "its pair stack (triangle multiplicative updates over an N x N x C pair tensor) is not a sequence of "
        "colwise/rowwise Linear pairs; it would need a dedicated sharding of the pair dimension"
    ),
    "T5FilmDecoder": (
        "the spectrogram-diffusion decoder (d_model 768): too narrow for tensor parallelism to help, and "
        "superseded by the audio DiTs"
    ),
    "PriorTransformer": (
        "the unCLIP / Kandinsky 2.x prior: a short sequence of CLIP embeddings through a narrow stack, "
        "where the two all-reduces per layer cost more than the matmuls they split"
    ),
}

NOT_COVERED_YET: dict[str, str] = {
    name: "shardable with the same colwise/rowwise rules; no plan written and proven yet"
    for name in (
        "AceStepTransformer1DModel", "AllegroTransformer3DModel", "AnyFlowFARTransformer3DModel",
        "AnyFlowTransformer3DModel", "BriaFibo2Transformer2DModel", "BriaFiboTransformer2DModel",
        "BriaTransformer2DModel", "CogView3PlusTransformer2DModel", "ConsisIDTransformer3DModel",
        "Cosmos3OmniTransformer", "DiTTransformer2DModel",
        "DreamLiteTransformer2DModel", "EasyAnimateTransformer3DModel", "ErnieImageTransformer2DModel",
        "HunyuanDiT2DModel", "Ideogram4Transformer2DModel",
        "JoyImageEditPlusTransformer3DModel", "JoyImageEditTransformer3DModel", 
        "Kandinsky6SRTransformer3DModel", "Kandinsky6Transformer3DModel", "LatteTransformer3DModel",
        "LongCatAudioDiTTransformer", "LuminaNextDiT2DModel", "MiniMaxMusic3Transformer1DModel",
        "MotifVideoTransformer3DModel", "NucleusMoEImageTransformer2DModel", "OmniGenTransformer2DModel",
        "PRXTransformer2DModel", "SanaVideoTransformer3DModel", "SanaWMLTX2RefinerTransformer3DModel",
        "SanaWMTransformer3DModel", "StableAudio3DiTModel", "StableAudioDiTModel", "Transformer2DModel",
        "WanAnimate2Transformer3DModel", "WanAnimateTransformer3DModel",
    )
}


def reason_without_plan(class_name: str) -> str | None:
    return UNSHARDABLE.get(class_name) or NOT_COVERED_YET.get(class_name)
