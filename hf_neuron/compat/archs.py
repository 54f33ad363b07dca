"""Which architectures a compatibility run covers, and how each one is built.

The denominator is the ranked list ``hf_neuron/compat/data/top100-text-generation.tsv`` (method in
``compatibility/METHOD.md``). Every entry stays in it whatever happens to it: the four entries that only
exist as multimodal classes are tested through that class on text-only input, and the one that needs
remote code is reported as not testable.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from pathlib import Path

from hf_neuron.compat.paths import IMAGE_RANKING_PATH, RANKING_PATH

# Set by the test-suite to enable the ``_test_*`` architectures (see ``hf_neuron.compat.testing_archs``).
TEST_ARCHS_ENV = "HF_NEURON_COMPAT_TEST_ARCHS"
TEST_PREFIX = "_test_"

# A handful covering the mechanisms that differ: dense, sliding window, classic absolute positions, MoE.
QUICK_ARCHS = ["llama", "qwen3", "mistral", "gpt2", "qwen3_moe"]
# The image-text-to-text quick subset: a fixed-size processor (one vision-tower graph per batch size).
QUICK_IMAGE_ARCHS = ["llava"]

# What the ranked list's ``status`` column says about how the entry is tested.
KIND_CAUSAL_LM = "causal_lm"
KIND_MULTIMODAL = "multimodal"  # tested through its multimodal class on text-only input
KIND_REMOTE_CODE = "remote_code"  # no class in the installed transformers: not testable here
KIND_TEST = "test"
KIND_IMAGE_TEXT = "image_text"  # an image-text-to-text class, generating from prompts with an image

_STATUS_TO_KIND = {
    "ok": KIND_CAUSAL_LM,
    "not_in_causal_lm_list": KIND_MULTIMODAL,
    "missing_in_transformers": KIND_REMOTE_CODE,
}


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    model_type: str
    rank: int | None = None  # 1-100 in the ranked list, None outside it
    tier: str | None = None
    kind: str = KIND_CAUSAL_LM

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ArchSpec":
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


def load_ranking(path: Path | None = None) -> list[ArchSpec]:
    path = Path(path) if path else RANKING_PATH
    if not path.exists():
        raise FileNotFoundError(f"ranked list not found at {path} (package data of hf_neuron: reinstall it)")
    specs = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            status = row["status"].strip()
            if status not in _STATUS_TO_KIND:
                raise ValueError(f"{path}: unknown status {status!r} for {row['model_type']}")
            specs.append(
                ArchSpec(
                    model_type=row["model_type"].strip(),
                    rank=int(row["rank"]),
                    tier=row["tier"].strip() or None,
                    kind=_STATUS_TO_KIND[status],
                )
            )
    ranks = [s.rank for s in specs]
    if sorted(ranks) != list(range(1, len(specs) + 1)):
        raise ValueError(f"{path}: ranks must be 1..{len(specs)} without gaps")
    return specs


def load_image_ranking(path: Path | None = None) -> list[ArchSpec]:
    """The ranked image-text-to-text list (``top20-image-text-to-text.tsv``, method in
    ``compatibility/METHOD-images.md``)."""
    path = Path(path) if path else IMAGE_RANKING_PATH
    if not path.exists():
        raise FileNotFoundError(f"ranked list not found at {path} (package data of hf_neuron: reinstall it)")
    with open(path, newline="") as fh:
        specs = [ArchSpec(model_type=row["model_type"].strip(), rank=int(row["rank"]), tier=row["tier"].strip() or None,
                          kind=KIND_IMAGE_TEXT) for row in csv.DictReader(fh, delimiter="\t")]
    if sorted(s.rank for s in specs) != list(range(1, len(specs) + 1)):
        raise ValueError(f"{path}: ranks must be 1..{len(specs)} without gaps")
    return specs


def select_images(arch_names: list[str] | None = None, quick: bool = False) -> list[ArchSpec]:
    """The image-text-to-text architectures of one run: the ranked list, or exactly ``arch_names``
    (types of the installed Transformers' image-text-to-text mapping), or the quick subset."""
    ranking = load_image_ranking()
    if quick:
        arch_names = list(QUICK_IMAGE_ARCHS)
    if not arch_names:
        return sort_specs(ranking)
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    by_name = {s.model_type: s for s in ranking}
    specs, unknown = [], []
    for name in dict.fromkeys(n.strip() for n in arch_names if n.strip()):
        if name in by_name:
            specs.append(by_name[name])
        elif name in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
            specs.append(ArchSpec(model_type=name, kind=KIND_IMAGE_TEXT))
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"unknown image-text-to-text architecture(s): {', '.join(unknown)}. Use model_type names "
                         "from hf_neuron/compat/data/top20-image-text-to-text.tsv or the installed Transformers' "
                         "image-text-to-text mapping")
    return sort_specs(specs)


def causal_lm_model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def test_archs_enabled() -> bool:
    return os.environ.get(TEST_ARCHS_ENV, "0") not in ("", "0")


def select(
    all_archs: bool = False,
    arch_names: list[str] | None = None,
    quick: bool = False,
    ranking: list[ArchSpec] | None = None,
) -> list[ArchSpec]:
    """The architectures of one run, in rank order (unranked ones after, alphabetically).

    Default: the ranked top-100. ``all_archs``: every causal-LM ``model_type`` of the installed
    transformers plus the ranked entries outside that mapping. ``arch_names``: exactly those.
    Unknown names raise before anything runs.
    """
    ranking = ranking if ranking is not None else load_ranking()
    by_name = {s.model_type: s for s in ranking}
    if sum(bool(x) for x in (all_archs, arch_names, quick)) > 1:
        raise ValueError("choose one of --all, --arch, --quick")
    if quick:
        arch_names = list(QUICK_ARCHS)
    if arch_names:
        specs, unknown = [], []
        causal = None
        for name in dict.fromkeys(n.strip() for n in arch_names if n.strip()):
            if name in by_name:
                specs.append(by_name[name])
            elif name.startswith(TEST_PREFIX) and test_archs_enabled():
                specs.append(ArchSpec(model_type=name, kind=KIND_TEST))
            else:
                causal = causal if causal is not None else set(causal_lm_model_types())
                if name in causal:
                    specs.append(ArchSpec(model_type=name))
                else:
                    unknown.append(name)
        if unknown:
            raise ValueError(
                f"unknown architecture(s): {', '.join(unknown)}. Use transformers model_type names "
                "from the ranked list (hf_neuron/compat/data/top100-text-generation.tsv) or the causal-LM "
                "mapping (`hf-neuron compat --all` runs them all)"
            )
        return sort_specs(specs)
    specs = list(ranking)
    if all_archs:
        specs += [ArchSpec(model_type=name) for name in causal_lm_model_types() if name not in by_name]
    return sort_specs(specs)


def sort_specs(specs: list[ArchSpec]) -> list[ArchSpec]:
    return sorted(specs, key=lambda s: (s.rank is None, s.rank or 0, s.model_type))
