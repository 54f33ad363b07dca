"""Run the fix and promise tests on the oldest releases ``pyproject.toml`` declares.

The dependency ranges are a promise: every release in them passes the tests. The newest end is what
a fresh ``pip install`` resolves (the README's commands test it); this script proves the oldest
end. It reads the lower bound of each checked dependency from ``pyproject.toml`` (so the pins can
never drift from what is declared), builds a virtual environment with exactly those releases, and
runs the tests of the fixes and of the documented promises in it.

    python scripts/version_matrix.py                 # oldest releases, the promise tests
    python scripts/version_matrix.py --list          # print the pins and the tests, run nothing
    python scripts/version_matrix.py -- -k padding   # extra pytest arguments after --

The environment is kept in ``~/.cache/hf_neuron/environments/oldest`` (``$HF_NEURON_CACHE``) and reused,
by this checkout or a fresh clone, while its pins (and the requirements ``pyproject.toml`` declares) are
unchanged. It must not have torchvision: the test of the fix for hosts
without it runs here (it skips where torchvision is installed, as on the newest releases).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from _environments import (LIBRARIES, ROOT, TEST_RUNNER, declared_ranges, ensure_venv, environments_dir, installed,
                           isolated_env, lower_bound)

#: Distributions pinned to their declared lower bound (the ones the adapters patch or build on,
#: and the test runner, whose behaviour the test suite depends on).
PINNED = LIBRARIES + TEST_RUNNER
#: The tests of the fixes and of the documented figures (placement, generation graphs, sliding window,
#: TP generation, TRL padding and loading, diffusers plans, fix detection).
PROMISE_TESTS = (
    "tests/patching",
    "tests/test_adapters.py",
    "tests/test_cli.py::test_env_check_passes_on_the_installed_releases",
    "tests/transformers/loading/test_placement.py",
    # hf-neuron check on the oldest release (the tests that size one checkpoint each, not the 10-config sweep)
    "tests/transformers/test_model_check.py::test_cli_prints_the_answer_and_its_exit_status",
    "tests/transformers/test_model_check.py::test_cli_not_tested_exit_status",
    "tests/transformers/test_model_check.py::test_state_space_model_prints_no_upstream_warnings",
    "tests/transformers/test_model_check.py::test_a_hub_id_in_the_local_cache",
    "tests/transformers/test_model_check.py::test_bad_input_is_one_line_and_a_distinct_status",
    "tests/transformers/test_model_check.py::test_sft_plans_a_training_step",
    "tests/transformers/generation/test_generation_graphs.py",
    "tests/transformers/generation/test_generation_defaults.py",
    "tests/transformers/generation/test_prefill_schedule.py",
    "tests/transformers/generation/test_prefill_buckets.py",
    "tests/transformers/generation/test_batch_buckets.py",
    "tests/transformers/generation/test_sliding_window_cache.py",
    "tests/transformers/tensor_parallel/test_tensor_parallel.py",
    "tests/transformers/tensor_parallel/test_model_tp_plans.py",
    "tests/transformers/test_optout.py",
    "tests/transformers/training/test_checkpointing.py",
    "tests/transformers/training/test_batches.py",
    "tests/transformers/training/test_evaluation.py",
    "tests/transformers/generation/test_cache_dtype.py",
    "tests/transformers/models/test_falcon.py",
    "tests/transformers/generation/test_cache_allocation.py",
    "tests/transformers/generation/test_compiled_call.py",
    "tests/transformers/generation/test_capture.py",
    "tests/transformers/models/test_qwen4_exp.py",
    "tests/transformers/models/test_deepseek_v4.py",
    "tests/transformers/models/test_recurrent_gemma.py",
    "tests/transformers/models/test_rwkv.py",
    "tests/transformers/models/test_minimax.py",
    "tests/transformers/models/test_big_bird.py",
    "tests/transformers/models/test_cache_length_positions.py",
    "tests/transformers/generation/test_padding_positions.py",
    "tests/transformers/generation/test_image_inputs.py",
    "tests/transformers/generation/test_vision_grid.py",
    "tests/transformers/models/test_qwen3_vl.py",
    "tests/tiny_models/test_vision_models.py",
    "tests/transformers/models/test_inkling.py",
    "tests/transformers/tensor_parallel/test_fused_tensors.py",
    "tests/transformers/test_plan.py",
    "tests/transformers/generation/test_warmup.py",
    # the fix for hosts without torchvision: it skips where torchvision is installed (the newest
    # environment has it), so this environment, which has none, is where it runs
    "tests/transformers/loading/test_processors.py",
    "tests/trl/test_padding.py",
    "tests/trl/test_model_loading.py",
    "tests/trl/test_user_recipe.py",
    "tests/trl/test_preference_and_online.py",
    "tests/peft/test_adapter_loading.py",
    "tests/diffusers/test_fixes.py",
    "tests/diffusers/test_tp_plans.py",
)
#: Run on the newest releases only (node-id prefixes): the costliest tests of a promise file whose fix
#: tests run here too. Four-rank variants of tests whose two-rank or one-process forms run here; the
#: preference trainers' multi-epoch runs (GRPO's fix test runs here); the warm-up's fresh-process run;
#: the SFT recipe's TP x FSDP2 layout (its TP=2 and the user script's one-process and FSDP2 runs stay here).
NEWEST_ONLY = (
    "tests/transformers/tensor_parallel/test_tensor_parallel.py::test_tp_generation_matches_single_device[4]",
    "tests/transformers/generation/test_warmup.py::test_concurrent_four_rank_warmup_loses_no_entry",
    "tests/transformers/generation/test_warmup.py::test_fresh_process_on_a_warmed_or_imported_cache_records_no_miss",
    "tests/trl/test_preference_and_online.py::test_dpo_two_epochs_bounded_shapes_and_cpu_losses",
    "tests/trl/test_preference_and_online.py::test_other_trainers_train_compiled_with_bounded_graphs",
    # every test of the recipe's TP x FSDP2 run (the run is shared, so all of them or none)
    "tests/trl/test_user_recipe.py::test_two_epochs_with_one_batch_shape[recipe-tp2-fsdp2]",
    "tests/trl/test_user_recipe.py::test_no_graph_compiled_after_the_first_epoch[recipe-tp2-fsdp2]",
    "tests/trl/test_user_recipe.py::test_checkpoint_loads_on_cpu[recipe-tp2-fsdp2]",
)


def lower_bounds() -> dict[str, str]:
    """``{distribution: oldest declared version}`` from pyproject's dependencies and test extra."""
    return {name: lower_bound(name, specifier) for name, specifier in declared_ranges(PINNED).items()}


def promise_tests_command(python: Path, pytest_args: list[str], newest_only: bool = False) -> list[str]:
    """pytest on the promise tests in the environment of ``python``; ``NEWEST_ONLY`` deselected unless
    ``newest_only`` (an environment of the newest releases)."""
    deselect = [] if newest_only else [f"--deselect={test}" for test in NEWEST_ONLY]
    return [str(python), "-m", "pytest", "-q", "-n", "auto", "-p", "no:cacheprovider", *PROMISE_TESTS, *deselect,
            *pytest_args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=environments_dir() / "oldest", help="where to build the environment")
    parser.add_argument("--list", action="store_true", help="print the pins and tests, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    pins = lower_bounds()
    if args.list:
        print("\n".join(f"{name}=={version}" for name, version in sorted(pins.items())))
        print("\n".join(PROMISE_TESTS))
        return 0
    # torch==X from the README's command takes the CPU build this machine keeps on disk.
    python = ensure_venv(args.venv, pins, [f"torch=={pins['torch']}", "-e", f"{ROOT}[test]"],
                         "the oldest declared releases")
    subprocess.run([str(python), "-m", "pip", "list", "--disable-pip-version-check"], check=True,
                   stdout=open(args.venv / "pip-list.txt", "w"))
    torchvision = installed(python, "torchvision")
    if torchvision:
        print(f"torchvision {torchvision} is installed in {args.venv}: tests/transformers/loading/test_processors.py (the fix "
              "for hosts without torchvision) would skip here as it does on the newest releases", file=sys.stderr)
        return 1
    print(f"oldest declared releases: {', '.join(f'{n} {v}' for n, v in sorted(pins.items()))}", flush=True)
    return subprocess.run(promise_tests_command(python, args.pytest_args), cwd=ROOT, env=isolated_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
