"""diffusers transformer classes without a tensor-parallel plan (upstream's or hf_neuron's), and why.

``UNSHARDABLE`` lists the classes the colwise/rowwise mechanism does not fit; ``NOT_COVERED_YET``
lists the ones it fits but for which no plan has been written and proven yet, ``NO_NEURON_PATH``
the ones whose forward cannot run on a neuron device at all (the same rules as
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
        "AceStepTransformer1DModel", "Cosmos3OmniTransformer", "LongCatAudioDiTTransformer",
        "MiniMaxMusic3Transformer1DModel", "SanaWMLTX2RefinerTransformer3DModel",
        "SanaWMTransformer3DModel", "StableAudio3DiTModel",
    )
}

#: Classes whose forward cannot run on a neuron device at all, so no plan can be proven there.
NO_NEURON_PATH: dict[str, str] = {
    name: (
        "its attention is FlexAttention (`torch.nn.attention.flex_attention`), which PyTorch runs only on CUDA, "
        "CPU, HPU and MPS devices; a colwise/rowwise plan shards it on CPU, but the model has no neuron path"
    )
    for name in ("AnyFlowFARTransformer3DModel", "Kandinsky6SRTransformer3DModel")
}


def reason_without_plan(class_name: str) -> str | None:
    return UNSHARDABLE.get(class_name) or NO_NEURON_PATH.get(class_name) or NOT_COVERED_YET.get(class_name)
