"""Scripts as users write them, derived from the announcement's SFT recipe (``scripts/recipes``).

Tests and benchmarks run the recipe unchanged, and two variants a user plausibly writes: one without
the recipe's ``automatic_dynamic_shapes`` line (a user who never read about Neuron's static shapes),
and one that also passes an evaluation split to the trainer. Each variant is checked to be derived
from the recipe's current text: if the recipe changes shape, these fail instead of drifting.
"""

from __future__ import annotations

from pathlib import Path

DYNAMIC_SHAPES_LINE = "    torch._dynamo.config.automatic_dynamic_shapes = False\n"
DYNAMIC_SHAPES_COMMENT = "can't compile Dynamo's automatic dynamic shapes"
TRAINER_CALL = """    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_dataset,
    )
"""
TRAINER_CALL_WITH_EVALUATION = """    eval_dataset = load_dataset(
        script_args.dataset_name, name=script_args.dataset_config, split=script_args.dataset_test_split
    ).select_columns(["messages"])
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )
"""


class RecipeChanged(AssertionError):
    """The recipe no longer has the text a variant is derived from."""


def without_static_shapes(recipe: Path, folder: Path) -> Path:
    """The recipe without its ``automatic_dynamic_shapes = False`` line (and that line's comment)."""
    text = Path(recipe).read_text()
    if DYNAMIC_SHAPES_LINE not in text:
        raise RecipeChanged(f"{recipe} no longer sets automatic_dynamic_shapes")
    lines = [
        line for line in text.splitlines(keepends=True)
        if line != DYNAMIC_SHAPES_LINE and DYNAMIC_SHAPES_COMMENT not in line
    ]
    path = Path(folder) / "sft_user_script.py"
    path.write_text("".join(lines))
    return path


def with_evaluation(recipe: Path, folder: Path) -> Path:
    """The recipe with the dataset's test split (``--dataset_test_split``) passed as ``eval_dataset``."""
    text = Path(recipe).read_text()
    if TRAINER_CALL not in text:
        raise RecipeChanged(f"{recipe} creates its trainer differently")
    path = Path(folder) / "sft_user_script_with_eval.py"
    path.write_text(text.replace(TRAINER_CALL, TRAINER_CALL_WITH_EVALUATION))
    return path
