"""Tiny configs of types whose releases have a shape the generic shrink alone breaks (CPU, seconds each).

Each case builds the tiny model of one such type and runs what failed before its rule existed: the
config, a forward, a reload of the saved checkpoint, or the generation config generate reads.
"""

from __future__ import annotations

import pytest
import torch

from hf_neuron.tiny_models import model_class_for, save_tiny_model, tiny_config, tiny_model


def _forward(model):
    ids = torch.randint(3, 500, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_dory_keeps_its_three_sections_and_both_attention_kinds():
    """Dory's to_dict doubles the layer counts (attention and mlp blocks listed apart)."""
    config = tiny_config("dory")
    assert (config.n_input_layers, config.n_recurrent_layers, config.n_output_layers) == (1, 2, 1)
    assert config.layer_types[1:3] == ["sliding_attention", "full_attention"]  # the recurrent section
    model, _ = tiny_model("dory")
    assert _forward(model).shape == (2, 12, 512)


def test_kolibri_scores_with_the_query_heads_of_key_head_0_and_reuses_an_indexers_keys():
    config = tiny_config("kolibri1_1")
    assert config.index_num_heads == config.num_attention_heads // config.num_key_value_heads
    assert config.kv_sharing_modes == [None, "store", None, "reuse"]
    assert config.mlp_only_intermediate_size == 128
    model, _ = tiny_model("kolibri1_1")
    assert _forward(model).shape == (2, 12, 512)


@pytest.mark.parametrize("model_type", ["inkling2_text", "inkling2_loop_text"])
def test_inkling2_head_fits_the_tiny_vocabulary_and_reloads(model_type, tmp_path):
    """The checkpoint's head is unpadded to ``unpadded_vocab_size`` on load: it must fit the vocabulary."""
    config = tiny_config(model_type)
    assert config.unpadded_vocab_size <= config.vocab_size
    path = save_tiny_model(model_type, tmp_path / model_type)
    model = model_class_for(model_type).from_pretrained(path, dtype=torch.float32).eval()
    assert _forward(model).shape[:2] == (2, 12)


@pytest.mark.parametrize("model_type", ["musicgen", "musicgen_melody"])
def test_musicgen_decoders_start_from_the_bos_token(model_type, tmp_path):
    """Their generate pads the delay pattern with decoder_start_token_id (released: the bos token)."""
    path = save_tiny_model(model_type, tmp_path / model_type)
    model = model_class_for(model_type).from_pretrained(path, dtype=torch.float32).eval()
    assert model.generation_config.decoder_start_token_id == model.generation_config.bos_token_id == 1


def test_musicgen_melody_greedy_generate_runs():
    model, _ = tiny_model("musicgen_melody")
    ids = torch.randint(3, 500, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                             min_new_tokens=4, do_sample=False)
    assert out.shape[-1] >= 4
