"""Processors with a video processor build, save and load without torchvision (text and image inputs).

A Neuron host often has no torchvision: the PyPI wheel is built against another torch than the one
the Neuron SDK pins, and fails at import (``operator torchvision::nms does not exist``). Transformers
then cannot use any processor that has a ``video_processor`` attribute (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL, ...), even for prompts without a video: Qwen-Image-2.1's pipeline, whose text encoder's
processor is a ``Qwen3VLProcessor``, cannot be built or loaded at all. Two places fail:

- ``ProcessorMixin.__init__`` checks each sub-processor against its modality's base class, found by
  name on the ``transformers`` module. The video base, ``VideoProcessorMixin``, needs no torchvision,
  but Transformers exports it only where torchvision is installed, so the lookup raises.
- ``ProcessorMixin.from_pretrained`` loads the video processor through ``AutoVideoProcessor``,
  whose classes are all torchvision-backed: it raises "requires `torchvision`".

Where torchvision cannot be imported, on a neuron host, this fix makes the lookup find the real
``VideoProcessorMixin`` and loads a checkpoint's video processor as :class:`VideoProcessorWithoutTorchvision`:
it keeps the checkpoint's settings (``merge_size``, ``patch_size``, ... which the processors read
for their image placeholders) and its class name, which ``save_pretrained`` writes back unchanged
(a host with torchvision loads the real class from the saved files), and raises a clear error when
it is given a video. Text and image inputs go through the processor as upstream.
"""

from __future__ import annotations

from hf_neuron.patching import fix, replace

FIX = "video-processor-without-torchvision"

PROCESSING_MODULE = "transformers.processing_utils"
VIDEO_BASE = "VideoProcessorMixin"
VIDEO_MODALITY = "video_processor"

#: Built when the fix applies (importing this module imports nothing of Transformers).
_CLASSES: dict[str, type] = {}


def video_processor_class() -> type:
    """:class:`VideoProcessorWithoutTorchvision`, a ``VideoProcessorMixin`` that needs no torchvision."""
    if "video" not in _CLASSES:
        from transformers.video_processing_utils import VideoProcessorMixin

        class VideoProcessorWithoutTorchvision(VideoProcessorMixin):
            """A checkpoint's video processor where torchvision is missing: its settings, no video decoding."""

            def __init__(self, **kwargs):
                # The checkpoint's class (e.g. "Qwen3VLVideoProcessor"), written back by ``to_dict``.
                self._upstream_type = kwargs.pop("video_processor_type", None)
                super().__init__(**kwargs)

            def preprocess(self, videos, **kwargs):
                raise ImportError(
                    f"video inputs need torchvision: this processor's {self._upstream_type or 'video processor'} "
                    "is torchvision-backed, and torchvision is not importable here (text and image inputs work "
                    "without it). Install a torchvision built for the installed torch to process videos."
                )

            def to_dict(self):
                config = super().to_dict()
                config.pop("_upstream_type", None)
                if self._upstream_type:
                    config["video_processor_type"] = self._upstream_type
                return config

        VideoProcessorWithoutTorchvision.__module__ = __name__
        VideoProcessorWithoutTorchvision.__qualname__ = VideoProcessorWithoutTorchvision.__name__
        _CLASSES["video"] = VideoProcessorWithoutTorchvision
    return _CLASSES["video"]


class AutoVideoProcessorWithoutTorchvision:
    """What ``ProcessorMixin.from_pretrained`` loads a processor's video processor with, under the fix."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        return video_processor_class().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)


def _video_base_is_missing() -> bool:
    """The gap, by behaviour: the processor class check cannot resolve the video base class by name."""
    from transformers import processing_utils
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return False
    names = getattr(processing_utils.MODALITY_TO_AUTOPROCESSOR_MAPPING, "_MAPPING_NAMES", None)
    lookup = vars(processing_utils.ProcessorMixin).get("get_possibly_dynamic_module")
    if not isinstance(names, dict) or VIDEO_MODALITY not in names or not isinstance(lookup, staticmethod):
        raise RuntimeError("transformers.processing_utils no longer maps sub-processor modalities to their auto "
                           "classes by name, or no longer resolves base classes in the static method "
                           "ProcessorMixin.get_possibly_dynamic_module")
    try:
        processing_utils.ProcessorMixin.get_possibly_dynamic_module(VIDEO_BASE)
    except (AttributeError, ValueError):
        return True
    return False


@fix(FIX, "transformers", _video_base_is_missing, waits_for=PROCESSING_MODULE, modality="image")
def patch_video_processor_lookup() -> None:
    """Without torchvision, no processor with a video processor (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, ...)
    can be built or loaded, even for text-only prompts: Qwen-Image-2.1's pipeline cannot start.

    Detected by asking ``ProcessorMixin.get_possibly_dynamic_module`` for ``VideoProcessorMixin`` (the
    class its sub-processor check needs) with torchvision missing: it raises. Patch: the lookup finds
    the real, torchvision-free ``VideoProcessorMixin`` (imported when asked for), and a checkpoint's video processor loads as
    ``VideoProcessorWithoutTorchvision`` (its settings kept and saved back; videos raise a clear error).
    """
    from transformers import processing_utils

    mixin = processing_utils.ProcessorMixin
    upstream = vars(mixin)["get_possibly_dynamic_module"].__func__

    def get_possibly_dynamic_module(module_name):
        if module_name == VIDEO_BASE:
            # Imported on use: this fix applies while ``processing_utils`` is imported, and at that
            # point the video module may not be importable yet (it imports ``processing_utils``).
            from transformers.video_processing_utils import VideoProcessorMixin

            return VideoProcessorMixin
        return upstream(module_name)

    replace(FIX, mixin, "get_possibly_dynamic_module", staticmethod(get_possibly_dynamic_module))
    replace(FIX, processing_utils.MODALITY_TO_AUTOPROCESSOR_MAPPING._MAPPING_NAMES, VIDEO_MODALITY,
            (__name__, AutoVideoProcessorWithoutTorchvision.__name__), mapping=True)
