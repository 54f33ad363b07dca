"""DeepSeek V4: compiled generation with static compressed caches, and an indexer without gradients.

Each attention layer of DeepSeek V4 keeps a sliding window of keys (keys are values) and, on its
"compressed" layers, a compressor: every ``compress_rate`` tokens are pooled into one compressed
entry that every later query may attend to (HCA, ``heavily_compressed_attention``), or that a lightning
indexer picks the top entries from (CSA, ``compressed_sparse_attention``). Upstream keeps the
compressor's state in dynamic cache layers that grow by concatenation: the leftover tokens of an
incomplete window, the compressed entries, and (CSA) the previous window's overlap half. Its model
class says ``_can_compile_fullgraph = False`` and Transformers has no static layer for the two layer
types, so ``generate`` on Neuron keeps a dynamic cache and runs eagerly. Three fixes give it one
prefill-chunk graph and one decode graph per batch size, with the tokens of CPU eager generation:

- ``deepseek-v4-static-compressed-cache``: static cache layers for both layer types (the classes
  below): the window, the compressor's leftover tokens, its compressed entries and the overlap half
  are buffers of fixed size, written in place; a forward of ``n`` tokens always hands the compressor
  the same number of windows (those that may complete), and only the complete ones are stored.
  Entries not yet written are hidden from every query.
- ``deepseek-v4-compressed-decode-causal``: a left-padded row's prompt is prefilled partly through the
  decode graph (see below); upstream's HCA decode step shows a query every compressed entry, while a
  prefill shows it only the entries its position may see. The decode step applies the prefill's rule.
- left padding: the compressor pools every token, padding included (the attention mask never
  reaches it), so a prompt left padded to a prefill bucket generates other tokens. The static layers
  say so (:data:`~hf_neuron.transformers.generation.chunked_prefill.LEFT_PADDING_CHANGES_RESULTS`)
  and ``generate`` prefills their prompts in whole chunks followed by decode steps, never padding.

The indexer returns the indices of the blocks each query attends to, so no gradient reaches its
projections in an eager training step; a compiled step gives them gradients of zeros instead, which an
optimizer applies (weight decay, moment updates). The same reasoning as Qwen4-Exp's static indexer
(:mod:`.qwen4_exp`).
"""

from __future__ import annotations

import functools

import torch

from hf_neuron.patching import fix, original, replace, wrap
from hf_neuron.transformers.generation.chunked_prefill import LEFT_PADDING_CHANGES_RESULTS

DEEPSEEK_V4_FIX = "deepseek-v4-indexer-without-gradients"
STATIC_CACHE_FIX = "deepseek-v4-static-compressed-cache"
DECODE_CAUSAL_FIX = "deepseek-v4-compressed-decode-causal"
DEEPSEEK_V4_MODULE = "transformers.models.deepseek_v4.modeling_deepseek_v4"
LAYER_TYPES = ("heavily_compressed_attention", "compressed_sparse_attention")


def _without_autograd(original_fn, self, *args, **kwargs):
    with torch.no_grad():
        return original_fn(self, *args, **kwargs)


def _deepseek_v4_indexer_records_autograd() -> bool:
    """Whether upstream's DeepSeek V4 indexer, run with autograd on, records its projections for a
    backward pass although its result is integer block indices."""
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Indexer

    config = DeepseekV4Config(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                              q_lora_rank=8, index_n_heads=2, index_head_dim=8, index_topk=2,
                              compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4})
    indexer = DeepseekV4Indexer(config)
    recorded = []
    indexer.kv_proj.register_forward_hook(lambda module, inputs, output: recorded.append(output.requires_grad))
    with torch.enable_grad():
        selected = original(DeepseekV4Indexer, "forward")(indexer, torch.randn(1, 4, 16), torch.randn(1, 4, 8),
                                                          torch.arange(4)[None], None, 0)
    if selected.is_floating_point() or not recorded:
        raise RuntimeError("DeepSeek V4's indexer no longer returns integer indices from its projections")
    return recorded[0]


@fix(DEEPSEEK_V4_FIX, "transformers", _deepseek_v4_indexer_records_autograd, waits_for=DEEPSEEK_V4_MODULE)
def patch_deepseek_v4_indexer_without_gradients() -> None:
    """DeepSeek V4's compiled training step gives its indexer gradients of zeros where eager gives none.

    Gap: the lightning indexer returns the indices of the blocks each query attends to, so no gradient
    reaches its projections in an eager step (``None``); its ops are still recorded for autograd, and
    a compiled step then returns zero gradients for them, which an optimizer applies (weight decay,
    moment updates) where eager training leaves them untouched. Detected by running upstream's
    indexer of a tiny config with autograd on and finding its key projection recorded. Patch: the
    indexer runs without autograd; its result, integer indices, is the same.
    """
    import importlib

    module = importlib.import_module(DEEPSEEK_V4_MODULE)
    wrap(DEEPSEEK_V4_FIX, module.DeepseekV4Indexer, "forward", _without_autograd)


# ----------------------------------------------------------------------------- static compressed caches


def _tiny_config():
    from transformers import DeepseekV4Config

    return DeepseekV4Config(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, head_dim=8,
                            q_lora_rank=8, index_n_heads=2, index_head_dim=8, index_topk=2, sliding_window=8,
                            layer_types=list(LAYER_TYPES), mlp_layer_types=["moe", "moe"],
                            compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4})


@functools.cache
def static_layer_classes() -> dict[str, type]:
    """hf_neuron's static cache layer class for each compressed layer type (built once, on first use)."""
    from transformers.cache_utils import StaticSlidingWindowLayer

    class StaticCompressedLayer(StaticSlidingWindowLayer):
        """A static sliding window of keys (keys are values) plus the compressor's state in fixed buffers.

        The window is the parent's; on top of it, per compressor ``name``:

        - ``buffer_kv[name]`` / ``buffer_gate[name]``: the last ``compress_rate - 1`` projected tokens;
          the leftover of an incomplete window (``tokens_seen % compress_rate`` of them) sits at the end.
        - ``compressed_kv[name]``: ``max_cache_len // compress_rate`` entry slots, entry ``i`` in slot
          ``i``; slots past the written ones hold zeros and are hidden from every query.
        - ``overlap_kv[name]`` / ``overlap_gate[name]`` (CSA): the last complete window's first half,
          zero keys and ``-inf`` gates (softmax weight 0, as upstream's absent state) before one.

        ``tokens_seen`` counts the tokens written (a tensor: no Python state the compiled graph guards on).
        """

        _layer_type = None  # registered by the fix, not by defining the class
        names: tuple[str, ...] = ()
        rate_type = ""

        def __init__(self, max_cache_len: int, config, **kwargs):
            super().__init__(max_cache_len=max_cache_len, sliding_window=config.sliding_window)
            self._is_croppable = False  # the compressor's state cannot be rewound
            self.compress_rate = config.compress_rates[self.rate_type]
            self.entry_slots = max(max_cache_len // self.compress_rate, 1)
            self.widths = self._widths(config)
            self.tokens_seen = torch.tensor(0, dtype=torch.long)
            self.buffer_kv, self.buffer_gate, self.compressed_kv = {}, {}, {}
            self.overlap_kv, self.overlap_gate = {}, {}
            self.step_counts = {}  # per name: [entries before this forward, windows it completes]

        @staticmethod
        def _widths(config) -> dict[str, tuple[int, int]]:
            raise NotImplementedError

        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            batch, device, dtype = key_states.shape[0], key_states.device, key_states.dtype
            held = self.compress_rate - 1
            for name, (projected, entry) in self.widths.items():
                self.buffer_kv[name] = torch.zeros((batch, held, projected), dtype=dtype, device=device)
                self.buffer_gate[name] = torch.zeros((batch, held, projected), dtype=dtype, device=device)
                self.compressed_kv[name] = torch.zeros((batch, self.entry_slots, entry), dtype=dtype, device=device)
                if projected == 2 * entry:
                    self.overlap_kv[name] = torch.zeros((batch, self.compress_rate, entry), dtype=dtype, device=device)
                    self.overlap_gate[name] = torch.full((batch, self.compress_rate, entry), float("-inf"),
                                                         dtype=dtype, device=device)
                self.step_counts[name] = torch.zeros(2, dtype=torch.long, device=device)
            self.tokens_seen = self.tokens_seen.to(device)
            if not torch.compiler.is_compiling():
                for tensor in self._state_tensors():
                    torch._dynamo.mark_static_address(tensor)

        def _state_tensors(self):
            yield self.tokens_seen
            for states in (self.buffer_kv, self.buffer_gate, self.compressed_kv, self.overlap_kv, self.overlap_gate,
                           self.step_counts):
                yield from states.values()

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            self.tokens_seen.add_(key_states.shape[-2])
            return keys, keys  # keys are values: the same tensor, as upstream's layer returns

        def store_compression_weights(self, name, kv, gate):
            """Upstream's contract (the windows to compress, the first one's position) in fixed shapes: the
            windows that *may* complete with these ``n`` tokens, ``(compress_rate - 1 + n) // compress_rate``
            of them; how many do complete is kept for :meth:`update_compressor_states`."""
            rate, tokens = self.compress_rate, kv.shape[1]
            past = self.tokens_seen - tokens  # the window update of this forward already counted them
            held = past % rate
            entries = past // rate
            windows = (rate - 1 + tokens) // rate
            self.step_counts[name].copy_(torch.stack([entries, (held + tokens) // rate]))
            seq_kv = torch.cat([self.buffer_kv[name], kv.to(self.buffer_kv[name].dtype)], dim=1)
            seq_gate = torch.cat([self.buffer_gate[name], gate.to(self.buffer_gate[name].dtype)], dim=1)
            # The held tokens end the buffer: the windows start ``held`` tokens before the new ones.
            index = (torch.arange(windows * rate, device=kv.device) + (rate - 1 - held)).clamp(max=seq_kv.shape[1] - 1)
            if rate > 1:
                self.buffer_kv[name].copy_(seq_kv[:, -(rate - 1):])
                self.buffer_gate[name].copy_(seq_gate[:, -(rate - 1):])
            return seq_kv.index_select(1, index), seq_gate.index_select(1, index), entries * rate

        def update_overlap_state(self, name, chunk_kv, chunk_gate, head_dim):
            prior_kv, prior_gate = self.overlap_kv[name].clone(), self.overlap_gate[name].clone()
            complete = self.step_counts[name][1]
            last = (complete - 1).clamp(min=0).reshape(1)
            keep = complete > 0
            self.overlap_kv[name].copy_(torch.where(
                keep, chunk_kv.index_select(1, last).squeeze(1)[..., :head_dim].to(prior_kv.dtype), prior_kv))
            self.overlap_gate[name].copy_(torch.where(
                keep, chunk_gate.index_select(1, last).squeeze(1)[..., :head_dim].to(prior_gate.dtype), prior_gate))
            return prior_kv, prior_gate

        def update_compressor_states(self, name, compressed):
            entries, complete = self.step_counts[name].unbind()
            stored = self.compressed_kv[name]
            source = torch.arange(self.entry_slots, device=stored.device) - entries
            written = (source >= 0) & (source < complete)
            new = compressed.index_select(1, source.clamp(0, compressed.shape[1] - 1)).to(stored.dtype)
            stored.copy_(torch.where(written[None, :, None], new, stored))
            return stored

        def written_entries(self):
            """How many compressed entries hold a window (a tensor; the same for every name)."""
            return self.tokens_seen // self.compress_rate

        def reset(self) -> None:
            super().reset()
            for tensor in self._state_tensors():
                tensor.zero_()
            for gate in self.overlap_gate.values():
                gate.fill_(float("-inf"))

        def reorder_cache(self, beam_idx) -> None:
            super().reorder_cache(beam_idx)
            for states in (self.buffer_kv, self.buffer_gate, self.compressed_kv, self.overlap_kv, self.overlap_gate):
                for tensor in states.values():
                    tensor.copy_(tensor.index_select(0, beam_idx.to(tensor.device)))

    setattr(StaticCompressedLayer, LEFT_PADDING_CHANGES_RESULTS, True)

    class StaticHCALayer(StaticCompressedLayer):
        """Static form of upstream's ``DeepseekV4HCACache`` (see :class:`StaticCompressedLayer`)."""

        rate_type = "heavily_compressed_attention"

        @staticmethod
        def _widths(config):
            return {"compressor": (config.head_dim, config.head_dim)}

    class StaticCSALayer(StaticCompressedLayer):
        """Static form of upstream's ``DeepseekV4CSACache``: the compressor's and the indexer's state."""

        rate_type = "compressed_sparse_attention"

        @staticmethod
        def _widths(config):
            return {"compressor": (2 * config.head_dim, config.head_dim),
                    "indexer": (2 * config.index_head_dim, config.index_head_dim)}

    return {"heavily_compressed_attention": StaticHCALayer, "compressed_sparse_attention": StaticCSALayer}


def _hide_unwritten_entries(original_fn, self, hidden_states, q_residual, position_ids, cache, layer_idx, *args,
                            **kwargs):
    """Upstream's HCA compressor; with a static layer, a decode step's block bias hides the entry slots
    not written yet (upstream's decode step returns no bias: every entry it holds is written)."""
    compressed_kv, block_bias = original_fn(self, hidden_states, q_residual, position_ids, cache, layer_idx,
                                            *args, **kwargs)
    layer = cache.layers[layer_idx] if cache is not None else None
    if block_bias is None and hasattr(layer, "written_entries"):
        slots = compressed_kv.shape[2]
        hidden = torch.arange(slots, device=compressed_kv.device) >= layer.written_entries()
        block_bias = compressed_kv.new_zeros((compressed_kv.shape[0], 1, position_ids.shape[1], slots))
        block_bias = block_bias.masked_fill(hidden, float("-inf"))
    return compressed_kv, block_bias


def _no_static_compressed_layers() -> bool:
    """Whether Transformers' static cache has no layer for DeepSeek V4's compressed layer types."""
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING

    from hf_neuron.patching import original

    return any(original(STATIC_LAYER_TYPE_MAPPING, layer_type, mapping=True) is None for layer_type in LAYER_TYPES)


@fix(STATIC_CACHE_FIX, "transformers", _no_static_compressed_layers, waits_for=DEEPSEEK_V4_MODULE)
def patch_static_compressed_cache() -> None:
    """DeepSeek V4 cannot get a static cache: its generation on Neuron is never compiled.

    Gap: the compressed layer types (HCA, CSA) have only dynamic cache layers, whose compressor state
    (leftover tokens, compressed entries, overlap) grows by concatenation with Python counts;
    ``StaticCache`` fails (``KeyError: 'heavily_compressed_attention'``), so ``generate`` keeps a dynamic
    cache and runs eagerly, every op dispatched on its own. Detected by finding no static layer class
    for the two layer types in Transformers' mapping. Patch: static layers of fixed-size buffers
    written in place (``static_layer_classes``), registered for the two types; the HCA compressor's
    decode step hides the entry slots not written yet.
    """
    import importlib

    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING

    module = importlib.import_module(DEEPSEEK_V4_MODULE)
    for layer_type, layer_class in static_layer_classes().items():
        replace(STATIC_CACHE_FIX, STATIC_LAYER_TYPE_MAPPING, layer_type, layer_class, mapping=True)
    wrap(STATIC_CACHE_FIX, module.DeepseekV4HCACompressor, "forward", _hide_unwritten_entries)


# ----------------------------------------------------------------------------- decode causality


def _decode_causal(original_fn, self, hidden_states, q_residual, position_ids, cache, layer_idx, *args, **kwargs):
    compressed_kv, block_bias = original_fn(self, hidden_states, q_residual, position_ids, cache, layer_idx,
                                            *args, **kwargs)
    slots = compressed_kv.shape[2]
    if position_ids.shape[1] == 1 and slots:
        # Upstream's prefill rule: query ``t`` sees entry ``w`` only when ``w < (t + 1) // compress_rate``.
        threshold = (position_ids + 1) // self.compress_rate  # [B, 1]
        unseen = torch.arange(slots, device=compressed_kv.device).view(1, 1, 1, -1) >= threshold[:, None, :, None]
        causal = compressed_kv.new_zeros((compressed_kv.shape[0], 1, 1, slots)).masked_fill(unseen, float("-inf"))
        block_bias = causal if block_bias is None else block_bias + causal
    return compressed_kv, block_bias


def _decode_sees_entries_prefill_hides() -> bool:
    """Whether upstream's HCA decode step lets a query attend a compressed entry that its position's
    prefill rule hides (one window compressed, a query at position 0)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HCACompressor

    config = _tiny_config()
    torch.manual_seed(0)
    compressor = DeepseekV4HCACompressor(config).eval()
    rate = compressor.compress_rate
    forward = original(DeepseekV4HCACompressor, "forward")
    with torch.no_grad():
        compressed_kv, block_bias = forward(compressor, torch.randn(1, rate, config.hidden_size), None,
                                            torch.zeros(1, 1, dtype=torch.long), None, 0)
    if compressed_kv.shape[2] != 1:
        raise RuntimeError("DeepSeek V4's HCA compressor no longer compresses one window of its input")
    return block_bias is None or bool(torch.isfinite(block_bias).all())


@fix(DECODE_CAUSAL_FIX, "transformers", _decode_sees_entries_prefill_hides, waits_for=DEEPSEEK_V4_MODULE)
def patch_decode_causal() -> None:
    """DeepSeek V4's HCA gives a left-padded row's prompt other outputs when its last tokens run as decode steps.

    Gap: a prefill lets query ``t`` see compressed entry ``w`` only when ``w < (t + 1) // compress_rate``
    (its position), but a decode step (one query) returns no bias and sees every entry. For an unpadded
    row the two agree; for a left-padded row (positions behind the cache slots) the decode step sees
    entries of padding windows its prefill hides. hf_neuron prefills a prompt that no prefill bucket
    fits in whole chunks then decode steps (DeepSeek V4's prompts cannot be left padded, see the module
    docstring), so a batch's padded row would generate other tokens than one eager prefill. Detected
    by running upstream's HCA compressor on one window with a single query at position 0, and finding
    the entry visible. Patch: a decode step applies the prefill's rule (an unpadded row is unchanged).
    """
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HCACompressor

    wrap(DECODE_CAUSAL_FIX, DeepseekV4HCACompressor, "forward", _decode_causal)


__all__ = ["DECODE_CAUSAL_FIX", "DEEPSEEK_V4_FIX", "STATIC_CACHE_FIX", "static_layer_classes"]
