"""Transformers adapter: unchanged Transformers code runs well on a neuron device.

``register()`` declares the fixes; ``hf_neuron.adapters`` applies them when ``transformers`` is
imported. Each adaptation is a named fix (``hf-neuron env`` lists them); it is applied when the
Transformers submodule it patches is imported. ``HF_NEURON_DISABLE=1`` applies none.

- :mod:`.generation`: generate() compiles one graph per prefill bucket plus one decode graph per
  (batch size, max_cache_len), whatever the prompt lengths, and gets Neuron defaults (static cache,
  max_cache_len, prefill buckets, "neuron" compile config); :mod:`.prefill_schedule` cuts a prompt
  into bucket chunks.
- :mod:`.batch_buckets`: generate pads a batch to the next of a few sizes (opt-in).
- :mod:`.compiled_call`: generate compiles the forward of model types upstream leaves uncompiled (Llama 4).
- :mod:`.recompile_limit`: generate keeps compiling past Dynamo's recompile limit of 8 graphs.
- :mod:`.cache`: sliding-window static cache bookkeeping without a Python int guard.
- :mod:`.cache_dtype`: a static cache takes the states of a mixed-precision forward.
- :mod:`.cache_shapes`: Falcon's static cache, allocated ahead, has Falcon's key/value head count.
- :mod:`.cache_allocation`: linear- and latent-attention cache layers are allocated before the first compiled forward.
- :mod:`.recurrent_cache`: state-space models (Mamba, Falcon-Mamba, Mamba-2) generate compiled with a
  static cache of recurrent state.
- :mod:`.module_states`: RecurrentGemma, whose recurrent state lives on its modules, generates compiled.
- :mod:`.indexed_attention`: Qwen4-Exp's sparse-attention indexer and position history in static shapes.
- :mod:`.traced_cache_length`: forwards that read the static cache's length inside the graph (MPT's
  ALiBi, Inkling's masks) compile into two graphs.
- :mod:`.moe_dispatch`: DBRX's and LongCat-Flash's expert layers run upstream's static "batched_mm"
  experts function on Neuron (LongCat-Flash's own from Transformers 5.25).
- :mod:`.multimodal_merge`: multimodal models run on text zero their placeholder ids without a
  boolean-mask write (Kimi-K2.5, Muse Glimmer).
- :mod:`.placement`, :mod:`.loading`: ``device_map`` on neuron devices, synchronous loading.
- :mod:`.tensor_parallel`: ``DistributedConfig(tp_size=N)`` generation that compiles on Neuron.
- :mod:`.tp_loading`: a checkpoint tensor fusing several projections is read per part under TP (HRM).
- :mod:`.tp_experts`: Inkling's expert layers run on their local shards with a packed gate/up split under TP.
- :mod:`.training_batches`: a Trainer's short last batch padded to the full batch size on Neuron.
- :mod:`.evaluation`: evaluations during compiled training run the compiled model on Neuron.
- :mod:`.resume`: checkpoints of models sharded at load time can be resumed on Neuron.
- :mod:`.checkpointing`: compiled activation checkpointing saves random ops on Neuron.
- :mod:`.hub_kernels`: attention layers compile whole inside activation checkpointing with ``kernels`` installed.
- :mod:`.tokenization`: prompts left padded to a multiple of the prefill chunk size.
- :mod:`.warmup`: ``warmup(model, batch_sizes, max_cache_len)`` compiles generation's graphs before traffic.
- :mod:`.plan`: the graphs and device memory a workload will need, predicted before anything compiles.
"""

from __future__ import annotations

import importlib

from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers.generation import (
    DEFAULT_MAX_CACHE_LEN,
    DEFAULT_PREFILL_BUCKETS,
    DEFAULT_PREFILL_CHUNK_SIZE,
    resolve_prefill_buckets,
    resolve_prefill_chunk_size,
)
from hf_neuron.transformers.tokenization import generation_padding_kwargs, tokenize_chats, tokenize_prompts
from hf_neuron.transformers.warmup import WarmupReport, warmup

# Modules whose import registers fixes (importing them does not import Transformers submodules).
FIX_MODULES = (
    "generation", "batch_buckets", "cache", "placement", "loading", "tensor_parallel", "checkpointing",
    "training_batches", "evaluation", "resume", "cache_dtype", "compiled_call", "recompile_limit", "cache_shapes",
    "cache_allocation", "traced_cache_length", "moe_dispatch", "multimodal_merge", "processors", "tp_statistics",
    "recurrent_cache", "indexed_attention", "module_states", "tp_experts", "tp_loading", "hub_kernels",
)


def register() -> None:
    """Declare the Transformers fixes (importing their modules imports no Transformers submodule)."""
    for name in FIX_MODULES:
        importlib.import_module(f"{__name__}.{name}")


def import_fix_targets() -> None:
    """Import every Transformers submodule a fix changes, so that all fixes are decided and applied."""
    from hf_neuron.patching import import_targets

    register()
    import_targets("transformers")


__all__ = [
    "DEFAULT_MAX_CACHE_LEN",
    "DEFAULT_PREFILL_BUCKETS",
    "DEFAULT_PREFILL_CHUNK_SIZE",
    "generation_padding_kwargs",
    "import_fix_targets",
    "register",
    "resolve_prefill_buckets",
    "resolve_prefill_chunk_size",
    "tokenize_chats",
    "tokenize_prompts",
    "upstream_behaviour",
    "warmup",
    "WarmupReport",
]
