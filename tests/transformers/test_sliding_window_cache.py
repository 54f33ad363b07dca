"""The static sliding-window cache layer: one compiled graph per query length, exact attention inputs."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers.cache_utils import StaticSlidingWindowLayer

from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.cache import FIX_NAME

WINDOW, MAX_CACHE_LEN = 8, 32


def _layer():
    layer = StaticSlidingWindowLayer(max_cache_len=MAX_CACHE_LEN, sliding_window=WINDOW)
    layer.lazy_initialization(torch.zeros(1, 1, 0, 2), torch.zeros(1, 1, 0, 2))
    return layer


def _states(positions):
    # key/value of position p is the vector (p, -p): where each position landed is readable.
    p = torch.as_tensor(positions, dtype=torch.float32)
    return torch.stack([p, -p], dim=-1)[None, None]


def _feed(layer, lengths, update=None):
    """Feed chunks of ``lengths`` tokens; returns, per call, (keys, kv_length, kv_offset)."""
    update = update or layer.update
    out, position = [], 0
    for q in lengths:
        kv_length, kv_offset = layer.get_mask_sizes(q)
        keys, _ = update(_states(range(position, position + q)), _states(range(position, position + q)))
        out.append((keys.clone(), kv_length, kv_offset))
        position += q
    return out


def test_keys_sit_at_their_position_minus_offset():
    # A prefill in chunks of 4, then decode steps well past the window.
    for keys, kv_length, kv_offset in _feed(_layer(), [4, 4, 4] + [1] * 12):
        assert keys.shape[-2] == kv_length
        seen = keys[0, 0, :, 0]
        for index, position in enumerate(seen.tolist()):
            if position != 0 or index + kv_offset == 0:
                # a real key: its slot is its position minus the offset the mask is built with
                assert index + kv_offset == position


def test_shapes_depend_only_on_the_query_length():
    lengths = [4, 4, 4] + [1] * 12
    shapes = {(q, keys.shape[-2]) for (keys, _, _), q in zip(_feed(_layer(), lengths), lengths)}
    assert shapes == {(4, WINDOW + 4), (1, WINDOW + 1)}


def _compiled_decode_graphs():
    layer = _layer()
    counter = CompileCounter()
    torch._dynamo.reset()
    update = torch.compile(layer.update, backend=counter, dynamic=False)
    _feed(layer, [1] * (WINDOW + 4), update=update)
    torch._dynamo.reset()
    return counter.frame_count


def test_decode_compiles_once():
    assert _compiled_decode_graphs() == 1


def test_upstream_recompiles_every_step():
    with upstream_behaviour(FIX_NAME):
        assert _compiled_decode_graphs() > 2


@pytest.mark.parametrize("chunk", [4, 8])
def test_attention_matches_dynamic_cache(chunk):
    """Model level: logits of a chunked prefill + decode equal those of the eager dynamic cache."""
    from transformers import DynamicCache, StaticCache

    from hf_neuron.testing.tiny_models import build_model

    model = build_model("mistral", sliding_window=WINDOW)
    ids = torch.randint(3, model.config.vocab_size, (1, 3 * chunk + 6), generator=torch.Generator().manual_seed(0))
    static = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
    dynamic = DynamicCache(config=model.config)
    with torch.no_grad():
        want = model(ids, past_key_values=dynamic).logits
        got = []
        for start in range(0, 3 * chunk, chunk):
            got.append(model(ids[:, start : start + chunk], past_key_values=static).logits)
        for start in range(3 * chunk, ids.shape[1]):
            got.append(model(ids[:, start : start + 1], past_key_values=static).logits)
    torch.testing.assert_close(torch.cat(got, dim=1), want, rtol=1e-5, atol=1e-5)
