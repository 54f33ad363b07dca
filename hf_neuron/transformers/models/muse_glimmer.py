"""Muse Glimmer run on text compiles: its placeholder ids are zeroed with static shapes (:mod:`._placeholder_ids`)."""

from hf_neuron.transformers.models._placeholder_ids import register_placeholder_fix

FIX_NAME = register_placeholder_fix("muse-glimmer-placeholder-ids-static-shape",
                                    "transformers.models.muse_glimmer.modeling_muse_glimmer", "MuseGlimmerModel")
