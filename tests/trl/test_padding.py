"""Batch padding on Neuron: multiples of 128 for every TRL trainer that pads (TRL 1.16's "auto",
backported to older TRL by ``trl.pad_to_multiple_of_auto``), packed SFT batches padded to
``max_length`` (``trl.pad_packed_to_max_length``), explicit user values always winning."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from hf_neuron.patching import get_fix, upstream_behaviour
from hf_neuron.trl import padding
from hf_neuron.trl._common import CONFIG_CLASSES

OLDEST_TRL = "1.10.0"  # oldest TRL declared supported (pyproject): all seven padding trainers ship

CONFIGS = [(module, name) for module, name in CONFIG_CLASSES.items()]


def _config_class(module: str, name: str):
    import trl  # noqa: F401  (activates the adapter)

    return getattr(importlib.import_module(module), name)


def _make(cls, tmp_path, **kwargs):
    return cls(output_dir=str(tmp_path), report_to="none", **kwargs)


@pytest.mark.parametrize("module,name", CONFIGS, ids=[n for _, n in CONFIGS])
def test_auto_pads_to_multiple_of_128_on_neuron(module, name, tmp_path):
    cls = _config_class(module, name)
    config = _make(cls, tmp_path)
    assert config.device.type == "neuron"
    assert config.pad_to_multiple_of == 128


@pytest.mark.parametrize("value", [64, None])
def test_explicit_value_wins(value, tmp_path):
    cls = _config_class("trl.trainer.sft_config", "SFTConfig")
    assert _make(cls, tmp_path, pad_to_multiple_of=value).pad_to_multiple_of == value
    # ... packed too
    assert _make(cls, tmp_path, pad_to_multiple_of=value, packing=True, max_length=256).pad_to_multiple_of == value


@pytest.mark.parametrize(
    "argv,expected", [([], 128), (["--pad_to_multiple_of", "64"], 64), (["--pad_to_multiple_of", "none"], None)]
)
def test_command_line(argv, expected, tmp_path):
    from trl import SFTConfig, TrlParser

    (config,) = TrlParser((SFTConfig,)).parse_args_and_config(
        ["--output_dir", str(tmp_path), "--report_to", "none", *argv]
    )
    assert config.pad_to_multiple_of == expected


def test_sft_collator_pads_to_128(tmp_path):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    config = _make(_config_class("trl.trainer.sft_config", "SFTConfig"), tmp_path)
    collator = DataCollatorForLanguageModeling(pad_token_id=0, pad_to_multiple_of=config.pad_to_multiple_of)
    lengths = [3, 70, 129, 200]
    shapes = {tuple(collator([{"input_ids": list(range(1, n + 1))}])["input_ids"].shape) for n in lengths}
    assert shapes == {(1, 128), (1, 256)}


# --- packed batches -------------------------------------------------------------------------------


def test_packed_sft_pads_to_max_length_on_neuron(tmp_path):
    assert get_fix("trl.pad_packed_to_max_length").active
    cls = _config_class("trl.trainer.sft_config", "SFTConfig")
    assert _make(cls, tmp_path, packing=True, max_length=256).pad_to_multiple_of == 256
    assert _make(cls, tmp_path, packing=True, max_length=300).pad_to_multiple_of == 300
    # without packing: the 128 multiple
    assert _make(cls, tmp_path, packing=False, max_length=256).pad_to_multiple_of == 128
    with upstream_behaviour("trl.pad_packed_to_max_length"):  # TRL's own resolution
        assert _make(cls, tmp_path, packing=True, max_length=256).pad_to_multiple_of == 128


def test_packed_remainder_batch_has_the_full_shape(tmp_path):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    cls = _config_class("trl.trainer.sft_config", "SFTConfig")
    config = _make(cls, tmp_path, packing=True, max_length=256, packing_strategy="wrapped")
    collator = DataCollatorForLanguageModeling(pad_token_id=0, pad_to_multiple_of=config.pad_to_multiple_of)
    full, remainder = list(range(1, 257)), list(range(1, 71))
    assert collator([{"input_ids": full}])["input_ids"].shape == collator([{"input_ids": remainder}])["input_ids"].shape


# --- the backport, against the mechanism ----------------------------------------------------------


def _old_style_config():
    """A config as TRL < 1.16 declares it: `pad_to_multiple_of: int | None = None`."""
    from transformers import TrainingArguments

    @dataclasses.dataclass
    class OldStyleConfig(TrainingArguments):
        pad_to_multiple_of: int | None = dataclasses.field(default=None, metadata={"help": "pad multiple"})
        packing: bool = False
        max_length: int | None = 1024

    return OldStyleConfig


def test_old_style_config_does_not_pad_without_backport(tmp_path):
    cls = _old_style_config()
    assert _make(cls, tmp_path).pad_to_multiple_of is None  # the gap


def test_backport_gives_old_configs_the_auto_mechanism(tmp_path):
    from transformers import HfArgumentParser

    cls = _old_style_config()
    assert padding.backport_auto_padding(cls)
    assert not padding.backport_auto_padding(cls)  # idempotent
    assert {f.name: f.default for f in dataclasses.fields(cls)}["pad_to_multiple_of"] == "auto"

    assert _make(cls, tmp_path).pad_to_multiple_of == 128
    assert _make(cls, tmp_path, pad_to_multiple_of=None).pad_to_multiple_of is None
    assert _make(cls, tmp_path, pad_to_multiple_of=64).pad_to_multiple_of == 64

    parser = HfArgumentParser((cls,))
    base = ["--output_dir", str(tmp_path), "--report_to", "none"]
    assert parser.parse_args_into_dataclasses(base)[0].pad_to_multiple_of == 128
    assert parser.parse_args_into_dataclasses(base + ["--pad_to_multiple_of", "32"])[0].pad_to_multiple_of == 32
    assert parser.parse_args_into_dataclasses(base + ["--pad_to_multiple_of", "none"])[0].pad_to_multiple_of is None

    with upstream_behaviour("trl.pad_to_multiple_of_auto"):  # every change of the backport comes off
        assert {f.name: f.default for f in dataclasses.fields(cls)}["pad_to_multiple_of"] is None
        assert _make(cls, tmp_path).pad_to_multiple_of is None
    assert _make(cls, tmp_path).pad_to_multiple_of == 128

    # a subclass declared afterwards inherits the mechanism
    @dataclasses.dataclass
    class Sub(cls):
        extra: int = 1

    assert _make(Sub, tmp_path).pad_to_multiple_of == 128


def test_backport_composes_with_packed_padding(tmp_path):
    cls = _old_style_config()
    padding.backport_auto_padding(cls)
    padding.pad_packed_to_max_length(cls)
    assert _make(cls, tmp_path, packing=True, max_length=512).pad_to_multiple_of == 512
    assert _make(cls, tmp_path, packing=True, max_length=512, pad_to_multiple_of=128).pad_to_multiple_of == 128


def test_resolution_off_neuron():
    assert padding.resolve_pad_to_multiple_of("auto", "cpu") is None
    assert padding.resolve_pad_to_multiple_of("auto", "neuron") == 128
    assert padding.resolve_pad_to_multiple_of("Null", "neuron") is None
    assert padding.resolve_pad_to_multiple_of("8", "cpu") == 8


# --- the backport, on the oldest TRL we support ---------------------------------------------------

OLD_TRL_CHECK = textwrap.dedent(
    """
    import importlib, json, os, sys, tempfile
    import trl
    assert trl.__version__ == sys.argv[1], trl.__version__
    from hf_neuron.trl._common import CONFIG_CLASSES
    out = {}
    for module, name in CONFIG_CLASSES.items():
        cls = getattr(importlib.import_module(module), name)
        kw = dict(output_dir=tempfile.mkdtemp(), report_to="none")
        out[name] = [cls(**kw).pad_to_multiple_of, cls(pad_to_multiple_of=64, **kw).pad_to_multiple_of]
    from trl import SFTConfig
    out["packed"] = SFTConfig(output_dir=tempfile.mkdtemp(), report_to="none", packing=True,
                              max_length=256).pad_to_multiple_of
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def oldest_trl(request):
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        target = cache.mkdir(f"trl-{OLDEST_TRL}")
    else:
        target = Path(tempfile.gettempdir()) / f"hf-neuron-trl-{OLDEST_TRL}"
    if not (target / "trl" / "__init__.py").exists():
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
             f"trl=={OLDEST_TRL}"],
            capture_output=True, text=True, timeout=300,
        )
        if proc.returncode != 0:
            pytest.skip(f"could not fetch trl=={OLDEST_TRL} (no package index?): {proc.stderr[-300:]}")
    return target


def _run_old_trl(target, disable: bool) -> dict:
    import json

    env = dict(os.environ, HF_NEURON_SIMULATOR="1", PYTHONPATH=str(target), HF_NEURON_DISABLE="1" if disable else "0")
    proc = subprocess.run(
        [sys.executable, "-c", OLD_TRL_CHECK, OLDEST_TRL], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
def test_backport_on_oldest_supported_trl(oldest_trl):
    result = _run_old_trl(oldest_trl, disable=False)
    for _, name in CONFIGS:
        assert result[name] == [128, 64], (name, result[name])
    assert result["packed"] == 256

    upstream_only = _run_old_trl(oldest_trl, disable=True)
    assert all(upstream_only[name] == [None, 64] for _, name in CONFIGS), upstream_only

