"""The static sliding-window cache layer: one compiled graph per query length, exact attention inputs."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers.cache_utils import StaticSlidingWindowLayer

from hf_neuron.transformers import upstream_behaviour
from hf_neuron.transformers.generation.sliding_window_cache import FIX_NAME

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

    from hf_neuron.tiny_models import build_model

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


# --- crop: assisted decoding rolls back rejected draft tokens ---------------------------------------


def _croppable_layer():
    # max_cache_len <= sliding_window: the layer never drops a position, so it can be cropped.
    layer = StaticSlidingWindowLayer(max_cache_len=WINDOW, sliding_window=WINDOW)
    layer.lazy_initialization(torch.zeros(1, 1, 0, 2), torch.zeros(1, 1, 0, 2))
    return layer


def test_crop_returns_the_layer_to_a_shorter_prefix():
    cropped, straight = _croppable_layer(), _croppable_layer()
    cropped.update(_states(range(5)), _states(range(5)))
    cropped.crop(-2)
    assert int(cropped.get_seq_length()) == 3 and cropped.cumulative_length_int == 3
    straight.update(_states(range(3)), _states(range(3)))
    torch.testing.assert_close(cropped.keys, straight.keys, rtol=0, atol=0)
    # The next tokens land where they would have without the rejected ones.
    assert cropped.get_mask_sizes(2) == straight.get_mask_sizes(2)
    got, _ = cropped.update(_states([3, 4]), _states([3, 4]))
    want, _ = straight.update(_states([3, 4]), _states([3, 4]))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_crop_rejects_a_positive_count_like_upstream():
    layer = _croppable_layer()
    layer.update(_states(range(3)), _states(range(3)))
    with pytest.raises(RuntimeError, match="negative"):
        layer.crop(1)


def test_is_croppable_follows_the_window():
    from transformers import StaticCache

    from hf_neuron.tiny_models import build_model

    if "is_croppable" not in vars(StaticSlidingWindowLayer):
        pytest.skip("sliding-window layers of this Transformers release are never cropped")
    config = build_model("mistral", sliding_window=WINDOW).config
    assert StaticCache(config=config, max_cache_len=WINDOW).is_croppable
    assert not StaticCache(config=config, max_cache_len=MAX_CACHE_LEN).is_croppable


def _assisted_tokens(model, ids, **kwargs):
    # Prompt lookup drafts tokens from n-grams of the prompt; rejected drafts are cropped away.
    return model.generate(ids, max_new_tokens=20, do_sample=False, prompt_lookup_num_tokens=3, **kwargs)


def test_assisted_decoding_with_a_static_sliding_window_cache():
    from hf_neuron.tiny_models import build_model

    model = build_model("mistral", sliding_window=64)
    ids = torch.randint(3, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([ids, ids, ids[:, :5]], dim=1)  # repeated n-grams: the lookup proposes drafts
    want = model.generate(ids, max_new_tokens=20, do_sample=False, cache_implementation="dynamic")
    try:
        got = _assisted_tokens(model, ids, cache_implementation="static", max_cache_len=64)
    except ValueError as exc:  # releases whose assisted decoding refuses static caches
        assert "cache" in str(exc).lower()
        pytest.skip(f"assisted decoding takes no static cache on this Transformers release: {exc}")
    assert torch.equal(got, want)
    with upstream_behaviour(FIX_NAME):
        assert torch.equal(_assisted_tokens(model, ids, cache_implementation="static", max_cache_len=64), want)
