"""Bounded batch shapes for TRL on Neuron: every new batch shape is a new Neuron compile.

Two fixes, both on TRL's config classes (SFT, DPO, GRPO, RLOO, KTO, Reward, Distillation):

- ``trl.pad_to_multiple_of_auto``: TRL 1.16 made ``pad_to_multiple_of="auto"`` the default, which
  pads batches to a multiple of 128 on Neuron. Older TRL defaults to ``None`` (pad to the longest
  sequence: one compile per distinct batch length). The fix backports the same mechanism — the same
  field default, the same strings accepted on the command line, the same resolution — to every
  config class whose field still defaults to something else.
- ``trl.pad_packed_to_max_length``: with ``packing``, almost every sequence is ``max_length`` long,
  but the remainder packs (one per ``map`` batch with ``packing_strategy="wrapped"``) are shorter; a
  batch made only of those gets its own shape, hence its own forward/backward compile. On Neuron,
  when the user left ``pad_to_multiple_of`` at "auto", packed SFT batches are padded to
  ``max_length``: one shape for the whole run.

An explicit ``pad_to_multiple_of`` (an int, or ``None`` passed in Python / ``none`` on the command
line) always wins over both.
"""

from __future__ import annotations

import dataclasses
import logging

from hf_neuron.patching import fix, replace, when_imported, wrap
from hf_neuron.patching.sources import class_field_default
from hf_neuron.devices import training_device_type
from hf_neuron.trl._common import CONFIG_CLASSES

logger = logging.getLogger("hf_neuron")

AUTO_FIX = "trl.pad_to_multiple_of_auto"
PACKED_FIX = "trl.pad_packed_to_max_length"
FIELD = "pad_to_multiple_of"
AUTO = "auto"
NEURON_PAD_MULTIPLE = 128

_logged: set[str] = set()


def resolve_pad_to_multiple_of(value, device_type: str | None):
    """TRL 1.16's resolution of the field: "auto" -> 128 on Neuron else None; CLI strings -> int/None."""
    if not isinstance(value, str):
        return value
    if value == AUTO:
        return NEURON_PAD_MULTIPLE if device_type == "neuron" else None
    if value.strip().lower() in ("none", "null", ""):
        return None
    return int(value)


def _log_once(key: str, message: str, *args) -> None:
    if key not in _logged:
        _logged.add(key)
        logger.info(message, *args)


# --- trl.pad_to_multiple_of_auto ------------------------------------------------------------------


def _needs_auto_backport(cls) -> bool:
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    return FIELD in fields and fields[FIELD].default != AUTO


def _set_parameter_default(function, name: str, value) -> None:
    """Give parameter ``name`` of the plain Python ``function`` the default ``value``."""
    kwdefaults = function.__kwdefaults__
    if kwdefaults and name in kwdefaults:
        replace(AUTO_FIX, kwdefaults, name, value, mapping=True)
        return
    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = function.__defaults__ or ()
    index = positional.index(name) - (len(positional) - len(defaults)) if name in positional else -1
    if index >= 0:
        replace(AUTO_FIX, function, "__defaults__", defaults[:index] + (value,) + defaults[index + 1 :])


def _resolve_auto(original, self):
    original(self)
    value = getattr(self, FIELD, None)
    if isinstance(value, str):
        device_type = training_device_type(self) if value == AUTO else None
        setattr(self, FIELD, resolve_pad_to_multiple_of(value, device_type))
        if value == AUTO and device_type == "neuron":
            _log_once(
                f"auto:{type(self).__name__}",
                "hf_neuron: %s.pad_to_multiple_of='auto' -> %d on Neuron (one compile per 128 tokens of "
                "batch length); set it explicitly to change this.",
                type(self).__name__,
                NEURON_PAD_MULTIPLE,
            )


def backport_auto_padding(cls) -> bool:
    """Give ``cls.pad_to_multiple_of`` TRL 1.16's "auto" default and its resolution. Idempotent.

    Returns True when ``cls`` was changed (False: field absent or already "auto").
    """
    if not dataclasses.is_dataclass(cls) or not _needs_auto_backport(cls):
        return False
    owner = next((k for k in cls.__mro__ if FIELD in k.__dict__.get("__annotations__", {})), cls)
    field = owner.__dataclass_fields__[FIELD]
    # The command line gets a string ("auto", "64", "none"), exactly as on TRL 1.16: HfArgumentParser
    # parses `int | str | None` as str.
    replace(AUTO_FIX, field, "default", AUTO)
    replace(AUTO_FIX, field, "type", int | str | None)
    replace(AUTO_FIX, owner.__annotations__, FIELD, int | str | None, mapping=True)
    for klass in {cls, owner}:
        _set_parameter_default(klass.__init__, FIELD, AUTO)
    wrap(AUTO_FIX, cls, "__post_init__", _resolve_auto)
    return True


def _backport_module(module) -> None:
    class_name = CONFIG_CLASSES.get(module.__name__)
    cls = getattr(module, class_name, None) if class_name else None
    if cls is not None:
        backport_auto_padding(cls)


def _auto_padding_gap() -> bool:
    # Read from the class bodies, without importing them: any config whose field default is not "auto".
    return any(
        class_field_default(module, cls, FIELD) not in (AUTO, dataclasses.MISSING)
        for module, cls in CONFIG_CLASSES.items()
    )


@fix(AUTO_FIX, "trl", _auto_padding_gap)
def install_auto_padding() -> None:
    """TRL before 1.16 pads each batch to its longest sequence (`pad_to_multiple_of=None`), so on Neuron
    every distinct batch length is a new compile. hf_neuron backports TRL 1.16's `"auto"` default
    (a multiple of 128 on Neuron, no padding elsewhere) to the SFT/DPO/GRPO/RLOO/KTO/Reward/Distillation
    configs.

    Detected per config class: its `pad_to_multiple_of` field exists and does not default to "auto".
    """
    for module_name in CONFIG_CLASSES:
        when_imported(module_name, _backport_module)


# --- trl.pad_packed_to_max_length -----------------------------------------------------------------


def _pad_packed(original, self):
    left_auto = getattr(self, FIELD, None) == AUTO
    original(self)
    max_length = getattr(self, "max_length", None)
    if not (left_auto and getattr(self, "packing", False) and max_length):
        return
    if getattr(self, FIELD, None) == max_length or training_device_type(self) != "neuron":
        return
    setattr(self, FIELD, max_length)
    _log_once(
        f"packed:{type(self).__name__}",
        "hf_neuron: packing on Neuron -> pad_to_multiple_of=max_length=%d: every packed batch has one "
        "shape (one compile); set pad_to_multiple_of explicitly to change this.",
        max_length,
    )


def pad_packed_to_max_length(cls) -> bool:
    """On Neuron, pad packed batches to ``max_length`` when ``pad_to_multiple_of`` was left at "auto"."""
    if not dataclasses.is_dataclass(cls):
        return False
    names = {f.name for f in dataclasses.fields(cls)}
    if not {"packing", "max_length", FIELD} <= names:
        return False
    wrap(PACKED_FIX, cls, "__post_init__", _pad_packed)
    return True


def _packed_module(module) -> None:
    cls = getattr(module, "SFTConfig", None)
    if cls is not None:
        pad_packed_to_max_length(cls)


def _packed_padding_gap() -> bool:
    # Whether upstream already pads packed batches to max_length is checked at run time, after its own
    # resolution (the wrapper leaves any value other than the "auto" one alone); here: the fields exist.
    return all(
        class_field_default("trl.trainer.sft_config", "SFTConfig", name) is not dataclasses.MISSING
        for name in ("packing", "max_length", FIELD)
    )


@fix(PACKED_FIX, "trl", _packed_padding_gap)
def install_packed_padding() -> None:
    """With `packing`, TRL pads each batch to a multiple of 128 on Neuron, so the short remainder packs
    give batches of other lengths and each is another forward/backward compile. hf_neuron pads packed
    SFT batches to `max_length` on Neuron when `pad_to_multiple_of` was left at "auto": one shape.

    Detected from SFTConfig's fields (`packing`, `max_length`, `pad_to_multiple_of`), then at run time: it
    acts only when upstream's own resolution did not already give `max_length`.
    """
    when_imported("trl.trainer.sft_config", _packed_module)


__all__ = [
    "AUTO",
    "NEURON_PAD_MULTIPLE",
    "backport_auto_padding",
    "pad_packed_to_max_length",
    "resolve_pad_to_multiple_of",
]
