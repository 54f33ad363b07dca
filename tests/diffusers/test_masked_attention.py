"""Mochi's joint attention on a neuron device: one graph, the same outputs as upstream's per-sample
selection of the valid prompt tokens on CPU, whatever the mask (padding at the end or holes inside)."""

from __future__ import annotations

import copy

import diffusers  # noqa: F401  (activates the adapter)
import pytest
import torch
from diffusers.models import attention_processor

from hf_neuron.diffusers.masked_attention import FIX_NAME
from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.patching.tracing import traces_whole

MASKS = {
    "padding at the end": [[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]],
    "holes": [[1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 1, 0]],
    "all valid": [[1] * 6, [1] * 6],
}


def _attention(context_pre_only=False):
    torch.manual_seed(0)
    return attention_processor.MochiAttention(
        query_dim=16, added_kv_proj_dim=12, processor=attention_processor.MochiAttnProcessor2_0(), heads=4, dim_head=4,
        context_pre_only=context_pre_only,
    ).eval()


def _inputs(mask):
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 5, 16, generator=generator)
    encoder = torch.randn(2, 6, 12, generator=generator)
    rotary = (torch.randn(5, 4, 2, generator=generator), torch.randn(5, 4, 2, generator=generator))
    return hidden, encoder, torch.tensor(mask), rotary


def test_fix_is_active():
    assert get_fix(FIX_NAME).active, get_fix(FIX_NAME).reason


def test_attention_traces_whole_on_neuron_only(neuron):
    attn = _attention()
    hidden, encoder, mask, _ = _inputs(MASKS["holes"])
    assert not traces_whole(attn, hidden, encoder, mask)  # CPU: upstream's processor, unchanged
    attn.to(neuron)
    args = (hidden.to(neuron), encoder.to(neuron), mask.to(neuron))
    assert traces_whole(attn, *args)
    with upstream_behaviour(FIX_NAME):
        assert not traces_whole(attn, *args)


@pytest.mark.parametrize("context_pre_only", [False, True])
@pytest.mark.parametrize("mask_kind", sorted(MASKS))
def test_static_form_equals_the_selection(neuron, mask_kind, context_pre_only):
    attn = _attention(context_pre_only)
    hidden, encoder, mask, rotary = _inputs(MASKS[mask_kind])
    with torch.no_grad():
        expected = attn(hidden, encoder, mask, image_rotary_emb=rotary)
        on_device = copy.deepcopy(attn).to(neuron)
        args = (hidden.to(neuron), encoder.to(neuron), mask.to(neuron))
        kwargs = {"image_rotary_emb": tuple(r.to(neuron) for r in rotary)}
        eager = on_device(*args, **kwargs)
        compiled = torch.compile(on_device, backend="neuron", fullgraph=True, dynamic=False)(*args, **kwargs)
    for result in (eager, compiled):
        assert len(result) == len(expected) == 2
        for out, ref in zip(result, expected):
            torch.testing.assert_close(out.cpu(), ref, atol=1e-6, rtol=1e-5)
    # Upstream's layout: the valid prompt tokens' outputs first, then zeros.
    if not context_pre_only:
        valid = mask.sum(dim=1)
        for sample, count in enumerate(valid.tolist()):
            assert torch.all(expected[1][sample, count:] == attn.to_add_out.bias) or count == mask.shape[1]
