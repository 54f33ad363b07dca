"""RWKV: compiled generation with its recurrent state held in a static transformers cache.

RWKV keeps its generation state outside any transformers cache: five tensors of shape ``(batch,
hidden_size, num_hidden_layers)`` (each block's last input to the feed-forward and to the attention,
the token shift, and the attention's numerator, denominator and running maximum), passed to the
forward as ``state`` and handed back in its output. ``generate`` names RWKV among the models that
cannot use a cache (``_supports_default_dynamic_cache``), so it ignores ``cache_implementation="static"``
for it, never prepares a cache, and therefore never compiles (its compile decision asks for a static
cache): on Neuron every generation step runs eagerly, op by op.

The state is fixed in size, exactly what a static cache needs, and RWKV's forward already updates the
tensors it is given in place (``state[k][:, :, layer] = ...``). ``rwkv-generation-state-cache`` puts
them in a cache (:class:`RwkvStateCache`, allocated by ``generate`` for the batch before the first
forward, as RWKV's forward would make them) and runs the forward from it. The compiled chunked prefill
then needs two facts about that cache, which it declares:

- it counts the tokens run through it (``get_seq_length``), so a prefill can resume after them, as a
  key/value cache's does (``COUNTS_PREFILLED_TOKENS``);
- RWKV never reads the attention mask: a left-padding token is computed as a token, so a prompt
  left padded to a prefill bucket would generate other tokens (``LEFT_PADDING_CHANGES_RESULTS``).
  Its prompts are prefilled in whole chunks, then one token at a time through the decode graph.

Those one-token steps meet an upstream bug, ``rwkv-one-token-batch-rows``: with one token per row
and a state, RWKV's attention and feed-forward broadcast the ``(batch, hidden)`` token shift against
``(batch, 1, hidden)`` hidden states, mixing every row of a batch with the others (batch 1 is
exact). Every decode step of a batched generation is affected, on CPU as on Neuron; with the fix a
row generates the tokens it generates alone, and a prompt's last tokens give the same state one at a
time as in one chunk.

RWKV then generates compiled in one prefill-chunk graph and one decode graph per batch size, with the
tokens of its eager generation on CPU. Without ``cache_implementation="static"`` (CPU, or a dynamic
cache asked for) generate keeps upstream's ``state`` path.
"""

from __future__ import annotations

import torch

from hf_neuron.patching import fix, get_fix, is_enabled, original, replace, wrap
from hf_neuron.transformers.generation.chunked_prefill import COUNTS_PREFILLED_TOKENS, LEFT_PADDING_CHANGES_RESULTS
from hf_neuron.transformers.generation.steps import CACHE_KEYWORDS, cache_keyword, generation_cache

STATE_CACHE_FIX = "rwkv-generation-state-cache"
ONE_TOKEN_FIX = "rwkv-one-token-batch-rows"
RWKV_MODULE = "transformers.models.rwkv.modeling_rwkv"

#: RWKV's state tensors, in the order its forward indexes them (``state[0]`` ... ``state[4]``).
STATE_NAMES = ("feed_forward_shift", "attention_shift", "numerator", "denominator", "maximum")
#: The running maximum a fresh state starts from (RWKV's forward subtracts 1e30 from zeros).
_INITIAL_MAXIMUM = -1e30


def _tiny_rwkv():
    from transformers import RwkvConfig
    from transformers.models.rwkv.modeling_rwkv import RwkvForCausalLM

    config = RwkvConfig(vocab_size=32, hidden_size=16, attention_hidden_size=16, intermediate_size=32,
                        num_hidden_layers=2, context_length=64)
    torch.manual_seed(0)
    return RwkvForCausalLM(config).eval()


# ----------------------------------------------------------------------------- the cache


def _cache_classes():
    """:class:`RwkvStateCache` and its layer, defined on first use (importing this module, which
    ``register()`` does, must import no Transformers submodule)."""
    global _classes
    if _classes is not None:
        return _classes
    from transformers.cache_utils import Cache, LinearAttentionLayer

    class RwkvStateLayer(LinearAttentionLayer):
        """One RWKV block's five state vectors, views of the cache's state tensors (allocated ahead)."""

        is_croppable = False  # a recurrent state cannot take back tokens

        def __init__(self, state: list, layer_idx: int):
            super().__init__(number_of_states=len(state))
            for index, tensor in enumerate(state):
                self.recurrent_states[index] = tensor[:, :, layer_idx]
                self.is_recurrent_states_initialized[index] = True
                self.has_previous_state[index] = True
            self.dtype, self.device = state[0].dtype, state[0].device

    setattr(RwkvStateLayer, LEFT_PADDING_CHANGES_RESULTS, True)

    class RwkvStateCache(Cache):
        """RWKV's generation state (the ``state`` its forward takes) in a static transformers cache.

        ``state`` holds the five tensors of shape ``(batch, hidden_size, num_hidden_layers)`` RWKV's
        forward allocates when it is given none, allocated ahead with the same values and updated in
        place by the forward; each block's layer holds views of its slice. ``get_seq_length`` is the
        number of tokens run through the cache.
        """

        is_croppable = False

        def __init__(self, config, batch_size: int, dtype: torch.dtype, device):
            shape = (batch_size, config.hidden_size, config.num_hidden_layers)
            # As RwkvModel.forward allocates it: the two shifts in the model's dtype, the rest in float32.
            self.state = [torch.zeros(shape, dtype=dtype if index <= 1 else torch.float32, device=device)
                          for index in range(len(STATE_NAMES))]
            self.state[-1].fill_(_INITIAL_MAXIMUM)
            self.seen_tokens = torch.zeros((), dtype=torch.long, device=device)
            super().__init__(layers=[RwkvStateLayer(self.state, index) for index in range(shape[-1])])

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return int(self.seen_tokens)

        def get_max_length(self, layer_idx: int | None = None) -> int:
            return -1  # no sequence dimension: any number of tokens fits

        def reset(self) -> None:
            for tensor in self.state[:-1]:
                tensor.zero_()
            self.state[-1].fill_(_INITIAL_MAXIMUM)
            self.seen_tokens.zero_()

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            for tensor in self.state:
                tensor.copy_(tensor.index_select(0, beam_idx.to(tensor.device)))

    setattr(RwkvStateCache, COUNTS_PREFILLED_TOKENS, True)
    _classes = RwkvStateCache, RwkvStateLayer
    return _classes


_classes = None


def state_cache(model, batch_size: int, device=None):
    """A fresh :class:`RwkvStateCache` for ``batch_size`` rows of ``model`` (on its device by default)."""
    cache_class, _ = _cache_classes()
    return cache_class(model.config.get_text_config(decoder=True), batch_size, model.dtype,
                       model.device if device is None else device)


def is_state_cache(cache) -> bool:
    return _classes is not None and isinstance(cache, _classes[0])


def generates_with_state_cache(model) -> bool:
    """Whether ``generate`` with a static cache gives ``model`` an :class:`RwkvStateCache` (this fix is
    applied and ``model`` is an RWKV model)."""
    import sys

    module = sys.modules.get(RWKV_MODULE)
    return (module is not None and get_fix(STATE_CACHE_FIX).active and is_enabled(STATE_CACHE_FIX)
            and isinstance(model, module.RwkvPreTrainedModel))


# ----------------------------------------------------------------------------- generate and forward


def _prepare_state_cache(original_fn, self, generation_config, model_kwargs, generation_mode, batch_size,
                         *args, **kwargs):
    from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

    wanted = (generates_with_state_cache(self) and generation_config.use_cache is not False
              and generation_config.cache_implementation in ALL_STATIC_CACHE_IMPLEMENTATIONS
              and generation_cache(model_kwargs) is None and model_kwargs.get("state") is None)
    if not wanted:
        return original_fn(self, generation_config, model_kwargs, generation_mode, batch_size, *args, **kwargs)
    # Upstream would only warn that it ignores the static cache. RWKV's forward rescales its weights
    # on its first call in eval mode; done here, outside the compiled forward, so that the first
    # compiled call does not mutate the weights and flip the flag its graph guards on.
    if self.training == self.rwkv.layers_are_rescaled:
        self.rwkv._rescale_layers()
    rows = max(generation_config.num_beams, generation_config.num_return_sequences) * batch_size
    model_kwargs[cache_keyword()] = state_cache(self, rows)
    return None


def _forward_from_state_cache(original_fn, self, *args, **kwargs):
    cache = generation_cache(kwargs)
    if not is_state_cache(cache) or kwargs.get("state") is not None:
        return original_fn(self, *args, **kwargs)
    for key in CACHE_KEYWORDS:
        kwargs.pop(key, None)
    # RWKV's forward continues from the state it is given and writes the new one into it, in place.
    kwargs.update(state=cache.state, use_cache=True)
    output = original_fn(self, *args, **kwargs)
    inputs = kwargs.get("input_ids", args[0] if args else None)
    if inputs is None:
        inputs = kwargs["inputs_embeds"]
    cache.seen_tokens.add_(inputs.shape[1])
    if not hasattr(output, "logits"):  # return_dict=False: upstream's tuple, with the state in it
        return output
    from transformers.modeling_outputs import CausalLMOutputWithPast

    # The cache goes where generate reads it back after each prefill chunk; the state is in it.
    return CausalLMOutputWithPast(loss=output.loss, logits=output.logits, hidden_states=output.hidden_states,
                                  attentions=output.attentions, **{cache_keyword(): cache})


def _mask_as_given(self, config=None, inputs_embeds=None, attention_mask=None, **kwargs):
    """RWKV's masks for generate: the 2D mask as given. RWKV's forward never reads a mask, and before
    Transformers 5.25 generate builds 4D attention masks for every compileable cache, asking it for the
    key/value sizes a cache of recurrent state does not have (``ValueError``)."""
    return attention_mask


def _no_cache_prepared() -> bool:
    """Whether upstream's generate prepares no cache at all for a tiny RWKV. (Asked without a cache
    implementation: asked for a static one, upstream logs that it ignores it.)"""
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin, GenerationMode

    model_kwargs = {}
    original(GenerationMixin, "_prepare_cache_for_generation")(_tiny_rwkv(), GenerationConfig(use_cache=True),
                                                                 model_kwargs, GenerationMode.GREEDY_SEARCH, 1, 8)
    return generation_cache(model_kwargs) is None and model_kwargs.get("state") is None


@fix(STATE_CACHE_FIX, "transformers", _no_cache_prepared, waits_for=RWKV_MODULE)
def patch_state_cache() -> None:
    """Generate ignores a static cache for RWKV, whose state is no transformers cache: it never compiles.

    Gap: RWKV passes its recurrent state as ``state`` (five tensors of fixed size) instead of a
    cache, and generate, which names RWKV among the models that cannot use one, ignores
    ``cache_implementation="static"`` for it; without a static cache generate does not compile, so
    on Neuron every step runs eagerly. Detected by preparing upstream's generation cache for a tiny
    RWKV, and finding none. Patch: generate allocates RWKV's state ahead in a static cache
    (:class:`RwkvStateCache`) when a static cache is asked for, and RWKV's forward given that cache
    runs from its state (updated in place) and returns the cache in its output. RWKV reads no
    attention mask, so generate passes it the 2D mask as given (before Transformers 5.25 generate
    builds 4D masks for every compileable cache, from key/value sizes this cache does not have).
    """
    import importlib

    from transformers.generation.utils import GenerationMixin

    module = importlib.import_module(RWKV_MODULE)
    wrap(STATE_CACHE_FIX, GenerationMixin, "_prepare_cache_for_generation", _prepare_state_cache)
    wrap(STATE_CACHE_FIX, module.RwkvForCausalLM, "forward", _forward_from_state_cache)
    if getattr(module.RwkvForCausalLM, "create_masks_for_generate", None) is None:
        replace(STATE_CACHE_FIX, module.RwkvForCausalLM, "create_masks_for_generate", _mask_as_given)


# ----------------------------------------------------------------------------- one-token rows


def _one_token_after(original_fn, self, hidden, state, index: int):
    """Upstream's function of ``hidden`` (one token per row) on two tokens: the shift state first, then
    the token. Its several-token path shifts the token by what precedes it, here the state: what the
    one-token path means to compute. The first position's results are dropped."""
    previous = state[index][:, :, self.layer_id].unsqueeze(1).to(hidden.dtype)
    results = original_fn(self, torch.cat((previous, hidden), dim=1), state=state)
    return tuple(r[:, 1:] if isinstance(r, torch.Tensor) else r for r in results)


def _mixes_rows(hidden, state) -> bool:
    return state is not None and hidden.size(1) == 1 and hidden.size(0) > 1


def _attention_inputs_per_row(original_fn, self, hidden, state=None):
    if not _mixes_rows(hidden, state):
        return original_fn(self, hidden, state=state)
    return _one_token_after(original_fn, self, hidden, state, 1)  # state[1]: the attention's shift


def _feed_forward_per_row(original_fn, self, hidden, state=None):
    if not _mixes_rows(hidden, state):
        return original_fn(self, hidden, state=state)
    return _one_token_after(original_fn, self, hidden, state, 0)  # state[0]: the feed-forward's shift


def _one_token_mixes_rows() -> bool:
    """Whether upstream's tiny RWKV, one token after a state at batch 2, differs from the same row alone."""
    from hf_neuron.patching import upstream_behaviour

    model = _tiny_rwkv()
    ids = torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), upstream_behaviour(ONE_TOKEN_FIX):
        batch = model(input_ids=ids[:, :4], use_cache=True)
        batch = model(input_ids=ids[:, 4:], state=batch.state, use_cache=True).logits
        row = model(input_ids=ids[:1, :4], use_cache=True)
        row = model(input_ids=ids[:1, 4:], state=row.state, use_cache=True).logits
    return batch.shape[:2] != (2, 1) or not torch.allclose(batch[:1], row, atol=1e-5, rtol=1e-4)


@fix(ONE_TOKEN_FIX, "transformers", _one_token_mixes_rows, waits_for=RWKV_MODULE)
def patch_one_token_rows() -> None:
    """RWKV's one-token forward from a state mixes the rows of a batch: batched generation is wrong.

    Gap: with one token per row and a state, the attention and the feed-forward take their token shift
    as ``state[k][:, :, layer]``, of shape ``(batch, hidden)``, and mix it with hidden states of shape
    ``(batch, 1, hidden)``: broadcasting makes ``(batch, batch, hidden)``, every row mixed with every
    other row's shift, and the logits come back with ``batch`` positions. Every decode step of a
    generation of more than one row is affected (batch 1 is not). Detected by running a tiny RWKV one
    token after a state at batch 2 and comparing a row with the same row alone. Patch: such a call
    runs upstream's several-token path on two tokens, the shift state then the token (the second
    position is what the one-token path means to compute); the first position is dropped.
    """
    import importlib

    module = importlib.import_module(RWKV_MODULE)
    wrap(ONE_TOKEN_FIX, module.RwkvSelfAttention, "extract_key_value", _attention_inputs_per_row)
    wrap(ONE_TOKEN_FIX, module.RwkvFeedForward, "forward", _feed_forward_per_row)


__all__ = ["ONE_TOKEN_FIX", "STATE_CACHE_FIX", "generates_with_state_cache", "is_state_cache", "state_cache"]
