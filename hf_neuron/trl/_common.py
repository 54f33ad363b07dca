"""Where TRL's classes live, and what every TRL fix asks of a training config."""

from __future__ import annotations

# TRL's trainers that pad batches, by config module -> config class (TRL >= 1.10 ships all of them).
CONFIG_CLASSES: dict[str, str] = {
    "trl.trainer.sft_config": "SFTConfig",
    "trl.trainer.dpo_config": "DPOConfig",
    "trl.trainer.grpo_config": "GRPOConfig",
    "trl.trainer.rloo_config": "RLOOConfig",
    "trl.trainer.kto_config": "KTOConfig",
    "trl.trainer.reward_config": "RewardConfig",
    "trl.trainer.distillation_config": "DistillationConfig",
}

TRAINER_MODULES = (
    "trl.trainer.sft_trainer",
    "trl.trainer.dpo_trainer",
    "trl.trainer.grpo_trainer",
    "trl.trainer.rloo_trainer",
    "trl.trainer.kto_trainer",
    "trl.trainer.reward_trainer",
    "trl.trainer.distillation_trainer",
)

BASE_TRAINER_MODULE = "trl.trainer.base_trainer"
UTILS_MODULE = "trl.trainer.utils"

