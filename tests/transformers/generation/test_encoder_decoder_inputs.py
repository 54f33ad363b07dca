"""Encoder-decoder models generate in a process with a neuron device: the step-input fixes pass the encoder's
output (a ``ModelOutput``) on unchanged, and a left-padded batch on neuron gives the CPU tokens (the
prefill schedule, which reads a decoder prompt's padding from the attention mask, leaves them alone)."""

from __future__ import annotations

import torch
from transformers import BartConfig, BartForConditionalGeneration

from hf_neuron.patching import upstream_behaviour
from hf_neuron.transformers import import_fix_targets


def _tiny_bart():
    config = BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    return BartForConditionalGeneration(config).eval()


GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False}


def test_bart_generates_on_cpu_as_upstream_with_the_fixes_applied():
    import_fix_targets()
    model = _tiny_bart()
    inputs = {"input_ids": torch.tensor([[0, 5, 6, 7, 8, 2]]), "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    greedy = GREEDY
    with torch.no_grad():
        tokens = model.generate(**inputs, **greedy)  # a ModelOutput turned into a dict raised KeyError: 0
        with upstream_behaviour():
            expected = model.generate(**inputs, **greedy)
    assert torch.equal(tokens, expected)


def test_a_left_padded_bart_batch_on_neuron_gives_the_cpu_tokens():
    import_fix_targets()
    cpu, device = _tiny_bart(), _tiny_bart().to("neuron")
    inputs = {"input_ids": torch.tensor([[1, 1, 1, 0, 9, 2], [0, 5, 6, 7, 8, 2]]),
              "attention_mask": torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])}
    with torch.no_grad():
        expected = cpu.generate(**inputs, **GREEDY)
        tokens = device.generate(**{k: v.to("neuron") for k, v in inputs.items()}, **GREEDY).cpu()
    assert torch.equal(tokens, expected)
