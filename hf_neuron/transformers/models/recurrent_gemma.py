"""Compiled generation for models that keep their recurrent state on their modules (RecurrentGemma).

RecurrentGemma's recurrent blocks keep a convolution window and an RG-LRU state as attributes of
their modules (``conv1d_state``, ``rg_lru.recurrent_states``), not in a transformers cache; only its
attention layers use the cache. Generation with a static cache and chunked prefill, the path that
compiles on Neuron, meets four gaps:

- ``generate-allocates-module-states``: generate never allocates the module states (the model does
  it only when called without a cache), so the first compiled forward creates them inside its graph
  and the next one guards on tensors where the first saw None: a graph more per batch size. The
  states of the previous generation also stay, which a chunked prefill (below) would read.
- ``recurrent-gemma-prefill-chunk-state``: the prefill path convolves each chunk from a zero window,
  ignoring the window the previous chunk left, so every chunk after the first starts wrong; and
  each forward replaces the states with new tensors of other strides (a slice of the chunk's
  outputs), each a new guard.
- ``recurrent-gemma-output-cache``: the causal-LM output carries no cache, which the chunked prefill
  reads back after each chunk (``AttributeError``).
- the static cache's recurrent layers, which the model never writes, are not waited for
  (``static-cache-allocate-every-layer`` skips a layer the first forward leaves untouched).

With these closed, RecurrentGemma generates compiled in one prefill-chunk graph and one decode graph
per batch size, with the tokens of an unchunked CPU generation.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, original, wrap
from hf_neuron.transformers.generation.steps import cache_keyword, generation_cache

STATES_FIX = "generate-allocates-module-states"
CHUNK_FIX = "recurrent-gemma-prefill-chunk-state"
OUTPUT_FIX = "recurrent-gemma-output-cache"

RECURRENT_GEMMA_MODULE = "transformers.models.recurrent_gemma.modeling_recurrent_gemma"


def _tiny_recurrent_gemma():
    from transformers import RecurrentGemmaConfig
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaForCausalLM

    config = RecurrentGemmaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, lru_width=16,
                                  attention_window_size=16, conv1d_width=4, block_types=["recurrent", "attention"])
    torch.manual_seed(0)
    return RecurrentGemmaForCausalLM(config).eval()


# ----------------------------------------------------------------------------- states allocated ahead


def keeps_module_states(model) -> bool:
    """Whether ``model`` keeps generation state on its modules, allocated by its own ``_setup_cache``.

    The method is the mark: Transformers before 5.25 also flagged such models ``_is_stateful``, a flag
    it has since removed, while RecurrentGemma keeps its states on its modules as before.
    """
    return callable(getattr(model, "_setup_cache", None))


def allocate_module_states(model, batch_size: int) -> None:
    """Zero module states of ``batch_size`` rows, as the model's own ``_setup_cache`` makes them."""
    model._setup_cache(model.config.get_text_config(decoder=True), batch_size, model.device, model.dtype)


def _prepare_cache_and_module_states(original_fn, self, generation_config, model_kwargs, generation_mode,
                                     batch_size, *args, **kwargs):
    result = original_fn(self, generation_config, model_kwargs, generation_mode, batch_size, *args, **kwargs)
    if keeps_module_states(self) and generation_config.use_cache is not False:
        allocate_module_states(self, batch_size)
    return result


def _module_states_left_to_the_forward() -> bool:
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin, GenerationMode

    model = _tiny_recurrent_gemma()
    if not keeps_module_states(model) or not hasattr(model.model.layers[0].temporal_block, "conv1d_state"):
        raise RuntimeError("RecurrentGemma no longer keeps its states on its modules: the probe no longer applies")
    model_kwargs = {}
    original(GenerationMixin, "_prepare_cache_for_generation")(model, GenerationConfig(use_cache=True), model_kwargs,
                                                                 GenerationMode.GREEDY_SEARCH, 1, 8)
    if generation_cache(model_kwargs) is None:
        raise RuntimeError("generate prepared no cache for RecurrentGemma: the probe no longer applies")
    return model.model.layers[0].temporal_block.conv1d_state is None


@fix(STATES_FIX, "transformers", _module_states_left_to_the_forward, waits_for=RECURRENT_GEMMA_MODULE)
def patch_allocate_module_states() -> None:
    """Generate leaves the states a model keeps on its modules (RecurrentGemma) to the first forward.

    Gap: generate prepares a cache but never calls the model's ``_setup_cache``, which only the model
    calls when run without a cache; the first compiled forward then creates the states inside its
    graph (one more graph per batch size) and a generation starts from what the previous one left.
    Detected by preparing a tiny RecurrentGemma's generation cache with upstream's code and finding
    its recurrent block without a state. Patch: with the cache, generate allocates zero module
    states for the batch (the model's own ``_setup_cache``), before the first forward.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(STATES_FIX, GenerationMixin, "_prepare_cache_for_generation", _prepare_cache_and_module_states)


# ----------------------------------------------------------------------------- prefill chunks

# Set by a recurrent block around its forward in a prefill chunk, read by its convolution: the
# convolution module and the window the previous chunk left. Plain globals, set and read inside the
# compiled forward (Dynamo tracks the stores), as the Mamba scan's initial state.
_conv_history = None
_conv_window = None


def _conv_from_history(original_fn, self, input, *args, **kwargs):
    """A causal convolution of a chunk that starts from the cached window instead of zeros.

    Upstream pads the chunk with ``width - 1`` zeros on each side and keeps the first ``length``
    outputs; each of the first ``width - 1`` outputs read some of the left zeros. What the window
    adds to them is the same convolution (without bias) over the window followed by zeros.
    """
    global _conv_window
    history = _conv_history
    output = original_fn(self, input, *args, **kwargs)
    if history is None or history[0] is not self:
        return output
    window = history[1].to(input.dtype)
    length = input.shape[-1]
    added = torch.nn.functional.conv1d(torch.nn.functional.pad(window, (0, length)), self.weight, None,
                                       groups=self.groups)
    _conv_window = torch.cat((window, input), dim=-1)[..., -window.shape[-1]:]
    return torch.cat((output[..., :length] + added, output[..., length:]), dim=-1)


def _block_forward_in_place(original_fn, self, input_states, *args, **kwargs):
    global _conv_history, _conv_window
    conv_state, recurrent_state = self.conv1d_state, self.rg_lru.recurrent_states
    batch = input_states.shape[0]
    allocated = conv_state is not None and recurrent_state is not None and conv_state.shape[0] == batch
    previous = _conv_history, _conv_window
    _conv_history = (self.conv_1d, conv_state) if allocated and input_states.shape[1] > 1 else None
    _conv_window = None
    try:
        output = original_fn(self, input_states, *args, **kwargs)
        window = _conv_window
    finally:
        _conv_history, _conv_window = previous
    if window is not None:
        self.conv1d_state = window
    if allocated and self.conv1d_state is not None and self.rg_lru.recurrent_states is not None \
            and not torch.is_grad_enabled():
        # Kept in the buffers allocated ahead: same tensors, same strides at every step. Not under
        # autograd, which saved the old states for the backward pass (a training forward).
        conv_state.copy_(self.conv1d_state)
        recurrent_state.copy_(self.rg_lru.recurrent_states)
        self.conv1d_state, self.rg_lru.recurrent_states = conv_state, recurrent_state
    return output


def _chunks_forget_the_window() -> bool:
    """Whether upstream's tiny RecurrentGemma, prefilled in two chunks, differs from one pass."""
    from transformers import DynamicCache

    from hf_neuron.patching import upstream_behaviour

    model = _tiny_recurrent_gemma()
    with torch.no_grad():  # a wider convolution than the default init, so that the window matters
        for block in (layer.temporal_block for layer in model.model.layers):
            if hasattr(block, "conv_1d"):
                block.conv_1d.weight.normal_(std=1.0)
    ids = torch.randint(0, 32, (1, 8), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(8)[None]
    with torch.no_grad(), upstream_behaviour(CHUNK_FIX):
        whole = model(input_ids=ids).logits[:, -1]
        allocate_module_states(model, 1)
        cache = DynamicCache(config=model.config)
        for part in (slice(0, 4), slice(4, 8)):
            chunked = model(input_ids=ids[:, part], position_ids=positions[:, part], use_cache=True,
                            **{cache_keyword(): cache}).logits[:, -1]
    return not torch.allclose(whole, chunked, atol=1e-5, rtol=1e-4)


@fix(CHUNK_FIX, "transformers", _chunks_forget_the_window, waits_for=RECURRENT_GEMMA_MODULE)
def patch_prefill_chunk_state() -> None:
    """RecurrentGemma's prefill chunks after the first convolve from zeros: chunked generation is wrong.

    Gap: the recurrent block's prefill path convolves the chunk as if it started the sequence, with
    zero padding instead of the window the previous chunk left, and replaces its states with new
    tensors at every forward (slices of other strides, one guard each in a compiled forward).
    Detected by prefilling a tiny RecurrentGemma in two chunks and comparing with one pass. Patch: a
    prefill chunk's convolution adds what the cached window contributes, and the states are written
    into the tensors allocated ahead.
    """
    import importlib

    module = importlib.import_module(RECURRENT_GEMMA_MODULE)
    wrap(CHUNK_FIX, module.RecurrentGemmaRecurrentBlock, "forward", _block_forward_in_place)
    wrap(CHUNK_FIX, torch.nn.Conv1d, "forward", _conv_from_history)


# ----------------------------------------------------------------------------- the output's cache


def _output_with_cache(original_fn, self, *args, **kwargs):
    output = original_fn(self, *args, **kwargs)
    cache = kwargs.get(cache_keyword())
    if cache is None or cache_keyword() in output:
        return output
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return CausalLMOutputWithPast(loss=output.get("loss"), logits=output.logits,
                                  hidden_states=output.get("hidden_states"), attentions=output.get("attentions"),
                                  **{cache_keyword(): cache})


def _output_drops_the_cache() -> bool:
    from transformers import DynamicCache
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaForCausalLM

    model = _tiny_recurrent_gemma()
    forward = original(RecurrentGemmaForCausalLM, "forward")
    with torch.no_grad():
        output = forward(model, input_ids=torch.ones(1, 2, dtype=torch.long), use_cache=True,
                         **{cache_keyword(): DynamicCache(config=model.config)})
    return cache_keyword() not in output


@fix(OUTPUT_FIX, "transformers", _output_drops_the_cache, waits_for=RECURRENT_GEMMA_MODULE)
def patch_output_cache() -> None:
    """RecurrentGemma's output has no cache: generate's chunked prefill fails after the first chunk.

    Gap: the causal-LM forward returns a ``CausalLMOutput`` without the cache it was given, and the
    chunked prefill reads the cache back from each chunk's output (``AttributeError``). Detected by
    calling upstream's forward of a tiny RecurrentGemma with a cache. Patch: the output carries the
    cache the forward was given (a ``CausalLMOutputWithPast`` with the same logits).
    """
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaForCausalLM

    wrap(OUTPUT_FIX, RecurrentGemmaForCausalLM, "forward", _output_with_cache)
