"""Every fix the adapters declare has a test that runs the workload with that fix switched off and sees
the gap (``upstream_behaviour(name)`` in the process, ``HF_NEURON_DISABLE=name`` in a torchrun job, or the
recorded original called directly).

The table below says which test does it for each fix; this test walks the registry, so a new fix without
an entry fails here, and each entry must name an existing test whose body switches a fix off.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# fix name (or a pattern for the per-class diffusers fixes) -> "path::test" that fails with it switched off
COVERAGE = {
    "generate-prefill-chunk-strides": "transformers/generation/test_generation_graphs.py::test_each_fix_is_needed_for_two_graphs",
    "generate-compiled-prefill-mask": "transformers/generation/test_generation_graphs.py::test_each_fix_is_needed_for_two_graphs",
    "generate-pad-prompt-to-chunk": "transformers/generation/test_generation_graphs.py::test_each_fix_is_needed_for_two_graphs",
    "generate-compiled-prefill-recurrent-mask":
        "transformers/generation/test_prefill_buckets.py::test_hybrid_prompts_with_and_without_padding_share_the_prefill_graph",
    "generate-batch-buckets": "transformers/generation/test_batch_buckets.py::test_without_the_fix_each_batch_size_compiles",
    "static-sliding-window-cache": "transformers/generation/test_generation_graphs.py::test_each_fix_is_needed_for_two_graphs",
    "generate-recompile-limit":
        "transformers/generation/test_generation_graphs.py::test_more_batch_sizes_than_dynamos_default_recompile_limit",
    "generate-max-cache-len-check": "transformers/generation/test_generation_defaults.py::test_without_the_check_the_cache_grows",
    "generate-neuron-defaults": "transformers/generation/test_generation_defaults.py::test_without_the_fix_nothing_compiles",
    "device-map-neuron": "transformers/loading/test_placement.py::test_upstream_leaves_neuron_unindexed",
    "device-map-auto-neuron-memory": "transformers/loading/test_placement.py::test_upstream_auto_map_is_cpu",
    "async-load-off-on-neuron": "transformers/loading/test_synchronous.py::test_upstream_uses_threads_on_neuron",
    "dtensor-embedding-mask-without-index-put":
        "transformers/tensor_parallel/test_tensor_parallel.py::test_vocab_parallel_masks_have_no_boolean_index_put",
    "tp-plan-constraints": "transformers/tensor_parallel/test_tensor_parallel.py::test_upstream_accepts_heads_that_do_not_split",
    "checkpointing-saves-random-ops": "transformers/training/test_checkpointing.py::test_without_the_fix_the_step_does_not_compile",
    "kernel-routing-outside-checkpointed-layers": "transformers/loading/test_hub_kernels.py::test_checkpointed_layers_compile_whole",
    "load-without-hub-kernels":
        "transformers/loading/test_hub_kernels.py::test_bitnet_tp2_equals_one_device_without_kernelizing_at_load",
    "input-grad-hooks-not-stacked": "transformers/training/test_checkpointing.py::test_input_gradient_hooks_do_not_stack_up",
    "trainer-full-last-batch": "transformers/training/test_batches.py::test_upstream_leaves_the_last_batch_short",
    "trainer-compiled-evaluation": "transformers/training/test_evaluation.py::test_evaluations_reuse_one_compiled_graph_set",
    "trainer-resume-sharded-models": "trl/test_resume_training.py::test_upstream_cannot_checkpoint_a_sharded_run",
    "static-cache-mixed-precision": "transformers/generation/test_cache_dtype.py::test_upstream_rejects_them",
    "static-cache-falcon-kv-heads": "transformers/models/test_falcon.py::test_falcon_generates_the_cpu_tokens_on_neuron",
    "generate-compiled-image-encoder":
        "transformers/generation/test_image_inputs.py::test_without_the_encoder_fix_the_vision_tower_runs_uncompiled",
    "generate-vision-grid-static-graph":
        "transformers/generation/test_vision_grid.py::test_without_the_fix_a_qwen2_vl_tower_breaks_into_many_graphs",
    "generate-image-sizes-as-constants":
        "transformers/generation/test_vision_sizes.py::test_without_the_fix_pixtrals_tower_breaks_into_many_graphs",
    "qwen3-vl-deepstack-static-merge":
        "transformers/models/test_qwen3_vl.py::test_generate_from_images_compiles_two_text_graphs_with_the_cpu_tokens",
    "qwen3-vl-moe-deepstack-static-merge":
        "transformers/models/test_qwen3_vl.py::test_generate_from_images_compiles_two_text_graphs_with_the_cpu_tokens",
    "generate-image-prompts-compile-the-decoder":
        "transformers/generation/test_image_inputs.py::test_without_the_decoder_fix_a_chunk_of_image_tokens_is_another_graph",
    "generate-compiles-every-model-type":
        "transformers/generation/test_compiled_call.py::test_llama4_generation_compiles_two_graphs_with_the_cpu_tokens",
    "static-cache-allocate-every-layer":
        "transformers/generation/test_cache_allocation.py::test_generate_compiles_two_graphs_with_the_cpu_tokens",
    "static-cache-early-init-shapes-measured": "transformers/generation/test_cache_allocation.py::"
        "test_early_init_with_the_config_shapes_fails_and_measured_shapes_give_the_cpu_tokens",
    "gemma3n-activation-sparsity-over-shards":
        "transformers/models/test_gemma3n.py::test_gemma3n_tp2_equals_one_device_only_with_the_fix",
    "tp-embedding-read-replicated":
        "transformers/tensor_parallel/test_embeddings.py::test_gemma4_tp2_equals_one_device_only_with_the_fix",
    "static-cache-recurrent-only":
        "transformers/generation/test_recurrent_cache.py::test_static_cache_has_no_key_value_shape_to_allocate",
    "generate-chunked-prefill-recurrent-cache":
        "transformers/generation/test_recurrent_cache.py::"
        "test_without_the_prefill_fix_chunked_prefill_refuses_the_cache_or_compiles_per_chunk",
    "*mamba-chunk-scan-initial-state":
        "transformers/generation/test_recurrent_cache.py::test_without_the_scan_fix_later_prefill_chunks_forget_the_state",
    "qwen4-exp-indexer-static-shapes":
        "transformers/models/test_qwen4_exp.py::test_without_the_indexer_fix_the_forward_is_not_one_graph",
    "indexed-cache-fixed-position-history":
        "transformers/models/test_qwen4_exp.py::test_without_the_history_fix_each_step_compiles_again",
    "generate-allocates-module-states":
        "transformers/models/test_recurrent_gemma.py::test_without_the_states_fix_the_first_chunk_is_its_own_graph",
    "recurrent-gemma-prefill-chunk-state":
        "transformers/models/test_recurrent_gemma.py::test_the_chunk_fix_alone_gives_one_pass_logits",
    "recurrent-gemma-output-cache":
        "transformers/models/test_recurrent_gemma.py::test_without_the_output_fix_the_chunked_prefill_fails",
    "big-bird-decoder-full-attention-before-generate":
        "transformers/models/test_big_bird.py::test_a_block_sparse_decoder_generates_compiled_with_the_cpu_tokens",
    "rwkv-generation-state-cache":
        "transformers/models/test_rwkv.py::test_generate_compiles_two_graphs_with_the_cpu_tokens",
    "rwkv-one-token-batch-rows": "transformers/models/test_rwkv.py::test_one_token_steps_keep_the_rows_of_a_batch_apart",
    "trocr-positions-from-cache-length":
        "transformers/models/test_cache_length_positions.py::test_generation_compiles_two_graphs_with_the_cpu_tokens",
    "mvp-positions-from-cache-length":
        "transformers/models/test_cache_length_positions.py::test_generation_compiles_two_graphs_with_the_cpu_tokens",
    "roformer-positions-from-cache-length":
        "transformers/models/test_cache_length_positions.py::test_generation_compiles_two_graphs_with_the_cpu_tokens",
    "tp-embedding-postprocessed-replicated":
        "transformers/tensor_parallel/test_embeddings.py::test_muse_glimmer_tp2_equals_one_device_only_with_the_fix",
    "tp-all-reduce-local-params":
        "transformers/models/test_inkling.py::test_shared_experts_all_reduced_equal_one_device_only_with_local_params",
    "inkling-tp-plan-packed-experts": "transformers/models/test_inkling.py::test_without_the_packed_split_tp2_logits_differ",
    "tp-shard-on-read-fused-checkpoint-tensors":
        "transformers/tensor_parallel/test_fused_tensors.py::test_hrm_tp2_equals_one_device_only_with_the_fix",
    "deepseek-v4-indexer-without-gradients":
        "transformers/models/test_deepseek_v4.py::test_deepseek_v4s_indexer_records_nothing_for_autograd",
    "deepseek-v4-static-compressed-cache":
        "transformers/models/test_deepseek_v4.py::test_the_static_cache_computes_the_dynamic_caches_logits",
    "deepseek-v4-compressed-decode-causal":
        "transformers/models/test_deepseek_v4.py::test_a_padded_row_sees_the_same_entries_in_decode_steps_as_in_a_prefill",
    "minimax-state-in-transformers-cache":
        "transformers/models/test_minimax.py::test_generate_compiles_two_graphs_with_upstreams_tokens",
    "mpt-alibi-query-length": "transformers/generation/test_cache_length_reads.py::test_mpt_generates_in_two_graphs",
    "generate-cache-despite-config-use-cache-false":
        "transformers/generation/test_cache_length_reads.py::test_mpt_checkpoint_without_cache_generates_compiled",
    "hybrid-sliding-generate-mask": "transformers/generation/test_cache_length_reads.py::test_inkling_generates_in_two_graphs",
    "static-sliding-window-mask-sizes-traced":
        "transformers/generation/test_cache_length_reads.py::test_inkling_generates_in_two_graphs",
    "dbrx-experts-static-dispatch":
        "transformers/models/test_static_experts.py::test_generation_compiles_two_graphs_with_the_cpu_tokens",
    "longcat-flash-experts-static-dispatch":
        "transformers/models/test_static_experts.py::test_generation_compiles_two_graphs_with_the_cpu_tokens",
    "*-placeholder-ids-static-shape":
        "transformers/models/test_placeholder_ids.py::test_generate_compiles_two_graphs_with_the_cpu_tokens",
    "moe-experts-sharded-under-tp": "transformers/tensor_parallel/test_experts.py::"
        "test_without_the_fixes_the_experts_stay_whole_and_training_fails",
    "moe-expert-dispatch-static": "transformers/tensor_parallel/test_experts.py::"
        "test_without_the_fixes_the_experts_stay_whole_and_training_fails",
    "ep-size-constraints": "transformers/tensor_parallel/test_experts.py::test_upstream_names_no_valid_ep_size",
    "video-processor-without-torchvision":
        "transformers/loading/test_processors.py::test_upstream_cannot_build_the_processor_without_torchvision",
    "transformers.tp_plan.*":
        "transformers/tensor_parallel/test_model_tp_plans.py::test_without_the_plan_fix_the_architecture_cannot_be_sharded",
    "tp-plan-support": "transformers/tensor_parallel/test_model_tp_plans.py::test_plans_alone_do_not_shard_correctly",
    "trl.atomic_checkpoints": "trl/test_checkpoints.py::test_upstream_leaves_a_partial_checkpoint",
    "peft.adapter_weights_through_host": "peft/test_adapter_loading.py::test_without_the_fix_no_adapter_loads_onto_neuron",
    "trl.neuron_device_map": "trl/test_model_loading.py::test_upstream_default_rejects_tensor_parallel_loading",
    "trl.pad_to_multiple_of_auto": "trl/test_padding.py",
    "trl.pad_packed_to_max_length": "trl/test_padding.py",
    "trl.static_shapes_on_neuron": "trl/test_training_defaults.py::test_upstream_leaves_automatic_dynamic_shapes_on",
    "trl.neuron_compile_hint": "trl/test_training_defaults.py::test_upstream_says_nothing_when_not_compiling",
    "trl.compiled_generation_on_neuron": "trl/test_preference_and_online.py::test_grpo_generation_compiles_once",
    "diffusers.repeated_blocks.*": "diffusers/test_fixes.py::test_gap_exists_without_the_adapter",
    "diffusers.tp_plan.*": "diffusers/test_fixes.py::test_gap_exists_without_the_adapter",
    "diffusers.tp_plan_support": "diffusers/test_tp_plans.py::test_plans_alone_do_not_shard_correctly",
    "diffusers.tp_clear_errors": "diffusers/test_tp_errors.py::test_upstream_rejections_do_not_name_the_class",
    "hidream-moe-static-dispatch": "diffusers/test_expert_dispatch.py::test_layer_traces_whole_on_neuron_only",
    "mochi-attention-static-prompt-mask":
        "diffusers/test_masked_attention.py::test_attention_traces_whole_on_neuron_only",
}
# How a test runs without a fix: in process, in a subprocess's environment, or by calling the original.
# ``tp2_only_with_the_fix`` (tests/transformers/conftest.py) reruns its TP=2 job with HF_NEURON_DISABLE.
SWITCHES = ("upstream_behaviour", "HF_NEURON_DISABLE", "original(", "tp2_only_with_the_fix(")


def _declared_fixes() -> list[str]:
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    from hf_neuron.patching import all_fixes, import_targets

    for library in ("transformers", "trl", "diffusers", "peft"):
        import_targets(library)
    return [f.name for f in all_fixes()]


def _switches_a_fix_off(node: str) -> bool:
    path, _, name = node.partition("::")
    source = (TESTS / path).read_text()
    if not name:
        return any(switch in source for switch in SWITCHES)
    tree = ast.parse(source)
    for item in ast.walk(tree):
        if isinstance(item, ast.FunctionDef) and item.name == name:
            body = ast.get_source_segment(source, item)
            return any(switch in body for switch in SWITCHES)
    raise AssertionError(f"{node}: no such test")


def test_every_declared_fix_has_a_switched_off_test():
    uncovered = [name for name in _declared_fixes() if not any(fnmatch.fnmatch(name, p) for p in COVERAGE)]
    assert uncovered == [], f"fixes without a test that switches them off: {uncovered}"


@pytest.mark.parametrize("fix_pattern", sorted(COVERAGE))
def test_the_named_test_switches_a_fix_off(fix_pattern):
    assert _switches_a_fix_off(COVERAGE[fix_pattern]), COVERAGE[fix_pattern]
