"""Generation from prompts with images: one vision-tower graph per image size, the text graphs unchanged.

Transformers encodes a prompt's images before the prefill (``get_image_features``, the vision tower and
projector) and hands every prefill chunk the rows of features for the placeholders it holds
(``mm_encoder_outputs``); the forward merges them into the token embeddings. On Neuron that costs
graphs two ways:

- ``generate-compiled-image-encoder``: the vision tower runs uncompiled, op by op.
- ``generate-image-prompts-compile-the-decoder``: the compiled forward contains the merge, whose input
  is as many feature rows as the chunk holds placeholders: every count of image tokens in a chunk, and
  a chunk with none, is another graph (and the count check is a graph break).

With both fixes a prompt with images compiles the vision tower once per processed image size (the
processor's resize decides it: a fixed-size processor gives one size, so one graph; towers of
dynamic-resolution models get buckets, :mod:`.vision_grid` and :mod:`.vision_sizes`), and the text
decoder's prefill-chunk and decode graphs, which take the merged embeddings and so have the same shape
whatever the chunk holds. The merge itself (an embedding lookup and a scatter) runs as device ops
outside the graphs.
"""

from __future__ import annotations

import functools
import inspect
import types

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, original, wrap
from hf_neuron.transformers.generation import recompile_limit, vision_grid, vision_sizes

GENERATION_MODULE = "transformers.generation.utils"
ENCODER_FIX = "generate-compiled-image-encoder"
DECODER_FIX = "generate-image-prompts-compile-the-decoder"

#: Set on a model while its current ``generate`` call has encoded images or videos.
ENCODED_IMAGES = "_hf_neuron_generate_encoded_images"
_MODALITIES = ("image", "video")


def has_encoded_images(model_kwargs) -> bool:
    """Whether ``generate``'s inputs hold pre-encoded image or video features."""
    outputs = model_kwargs.get("mm_encoder_outputs")
    return isinstance(outputs, dict) and any(outputs.get(m) is not None for m in _MODALITIES)


def vision_bucket(model, inputs) -> tuple:
    """What decides the vision-tower graph that ``generate`` compiles for ``inputs`` (a processor's output):
    the padded patch count for a tower that takes the images' grid, the padded pixels and each image's
    size for a tower that takes the sizes, else the processed pixel values' shape."""
    base = model.base_model
    grid, sizes = inputs.get("image_grid_thw"), inputs.get("image_sizes")
    if grid is not None and vision_grid.grid_tower(base) is not None:
        return vision_grid.vision_bucket(model, inputs["pixel_values"], grid)
    if sizes is not None and vision_sizes.sized_tower(base) is not None:
        return vision_sizes.vision_bucket(inputs["pixel_values"], sizes)
    return tuple(inputs["pixel_values"].shape)


def _compile_config(model):
    from hf_neuron.transformers.generation.defaults import _neuron_compile_config

    return _neuron_compile_config(model, None)[0] or model._default_compile_config()


# ----------------------------------------------------------------------------- the vision tower


def _encoder_runs_uncompiled() -> bool:
    """Run upstream's encoding step on a stand-in model and see whether the encoder was compiled."""
    from transformers.generation.utils import GenerationMixin

    compiling = []

    def get_image_features(pixel_values, **kwargs):
        compiling.append(torch.compiler.is_compiling())
        return {"pooler_output": pixel_values}

    stand_in = types.SimpleNamespace(input_modalities=("image", "text"),
                                     base_model=types.SimpleNamespace(get_image_features=get_image_features))
    model_kwargs = {"pixel_values": torch.zeros(1, 3, 2, 2)}
    original(GenerationMixin, "_prepare_multimodal_encoder_kwargs_for_generation")(stand_in, model_kwargs)
    if not compiling:
        raise RuntimeError("upstream's multimodal encoding step did not call get_image_features")
    return not any(compiling)


def install_output_hooks_before_tracing(model) -> None:
    """Install the output-recording hooks of the vision sub-models before their first trace.

    A vision tower that selects hidden states installs Transformers' output-recording hooks in its first
    forward, under a lock, which Dynamo cannot trace: the first image size in a process would compile as
    two graphs. The text decoder is left alone (its compiled graphs stay those of upstream).
    """
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:  # no lazily installed hooks in this release: nothing to do
        return
    from transformers import PreTrainedModel

    skip = {id(model), id(model.base_model), id(_text_decoder(model))}
    for module in model.modules():
        if (isinstance(module, PreTrainedModel) and id(module) not in skip
                and getattr(module, "_can_record_outputs", None)
                and not getattr(module, "_output_capturing_hooks_installed", False)):
            maybe_install_capturing_hooks(module)


def _encode_compiled(original_fn, self, model_kwargs, *args, **kwargs):
    if not model_on_neuron(self):
        return original_fn(self, model_kwargs, *args, **kwargs)
    base = self.base_model
    config = _compile_config(self)
    compiled = base.__dict__.setdefault("_hf_neuron_compiled_encoders", {})
    install_output_hooks_before_tracing(self)
    for tower, forward in ((vision_grid.grid_tower(base) if vision_grid.active() else None,
                            vision_grid.static_grid_forward),
                           (vision_sizes.sized_tower(base) if vision_sizes.active() else None,
                            vision_sizes.constant_sizes_forward)):
        if tower is not None:
            return _encode_with_compiled_tower(original_fn, self, tower, forward, config, model_kwargs, *args, **kwargs)
    installed = []
    for modality in _MODALITIES:
        name = f"get_{modality}_features"
        encoder = getattr(base, name, None)
        if encoder is None or name in base.__dict__:
            continue
        entry = compiled.get(name)
        if entry is None or entry[0] != config:
            # Keyed by the compile config, as upstream keys its compiled forward; Dynamo keeps one graph
            # per input shape, which is one per processed image size.
            entry = compiled[name] = (config, _features_compiled(base, encoder, config))
        setattr(base, name, entry[1])
        installed.append(name)
    try:
        return original_fn(self, model_kwargs, *args, **kwargs)
    finally:
        for name in installed:
            base.__dict__.pop(name, None)


def vision_tower(base):
    """The vision tower of ``base``: its direct sub-module built from the vision config, or None."""
    vision_config = getattr(base.config, "vision_config", None)
    if vision_config is None:
        return None
    for module in base.children():
        if type(getattr(module, "config", None)) is type(vision_config):
            return module
    return None


def _features_compiled(base, encoder, config):
    """``encoder`` (a features function of ``base``) compiled whole, or, when it does not trace as one graph,
    run as is with only the vision tower compiled.

    Some features functions drop padding tiles with a boolean mask (Idefics3) or read the tiles' count
    from the data before the tower: compiled whole, those are graph breaks. Decided at the first call,
    by tracing the call without compiling (:func:`hf_neuron.patching.tracing.traces_whole`); the tower
    alone then takes tiles of a static shape, and the steps around it run as device ops."""
    from hf_neuron.patching.tracing import traces_whole

    options = _compile_options(config)
    whole = torch.compile(encoder, **options)
    tower = vision_tower(base)
    decided: list[bool] = []

    @functools.wraps(encoder)  # upstream reads the features function's signature
    def features(*args, **kwargs):
        if not decided:
            decided.append(tower is None or traces_whole(encoder, *args, **kwargs))
        if decided[0]:
            return whole(*args, **kwargs)
        compiled_tower = tower.__dict__.get("_hf_neuron_compiled_alone")
        if compiled_tower is None or compiled_tower[0] != config:
            compiled_tower = tower.__dict__["_hf_neuron_compiled_alone"] = (
                config, torch.compile(type(tower).forward.__get__(tower), **options))
        tower.forward = compiled_tower[1]
        try:
            return encoder(*args, **kwargs)
        finally:
            del tower.forward

    return features


def _compile_options(config) -> dict:
    """``torch.compile`` options of generation's compile config, with room for one graph per image bucket."""
    options = config.to_dict()
    if not recompile_limit._user_set_the_limit():  # the same budget as the compiled forward's
        options.update(recompile_limit=recompile_limit.GENERATION_RECOMPILE_LIMIT, isolate_recompiles=True)
    return options


def _encode_with_compiled_tower(original_fn, self, tower, make_forward, config, model_kwargs, *args, **kwargs):
    """The encoding step with ``tower`` compiled alone, called through ``make_forward(tower, compiled)``
    (which hands it inputs of static shapes, :mod:`.vision_grid`, :mod:`.vision_sizes`); the features
    functions around it run as device ops."""
    entry = tower.__dict__.get("_hf_neuron_compiled_tower")
    if entry is None or entry[0] != config or entry[1] is not make_forward:
        compiled = torch.compile(type(tower).forward.__get__(tower), **_compile_options(config))
        entry = tower.__dict__["_hf_neuron_compiled_tower"] = (config, make_forward, make_forward(tower, compiled))
    tower.forward = entry[2]
    try:
        return original_fn(self, model_kwargs, *args, **kwargs)
    finally:
        del tower.forward


@fix(ENCODER_FIX, "transformers", _encoder_runs_uncompiled, waits_for=GENERATION_MODULE, modality="image")
def patch_compiled_image_encoder() -> None:
    """The vision tower of a vision-language model runs uncompiled in ``generate``.

    ``generate`` encodes a prompt's images before the prefill by calling the model's
    ``get_image_features`` (vision tower and projector) as is, while only the text forward is compiled:
    on Neuron every op of the tower is dispatched on its own. Detected by running upstream's encoding step
    on a stand-in model whose ``get_image_features`` records whether it runs compiled. Patch: for a model
    on a neuron device, the encoding step calls the features functions compiled with generation's compile
    config (static shapes): one graph per processed image size. A features function that does not trace
    as one graph (Idefics3 drops padding tiles with a boolean mask) runs as is around its vision tower,
    compiled alone; towers that take the images' grid or sizes are compiled alone on static inputs
    (:mod:`.vision_grid`, :mod:`.vision_sizes`).
    """
    from transformers.generation.utils import GenerationMixin

    wrap(ENCODER_FIX, GenerationMixin, "_prepare_multimodal_encoder_kwargs_for_generation", _encode_compiled)


# ----------------------------------------------------------------------------- the text decoder


def _compiles_the_whole_forward() -> bool:
    """Ask upstream's ``get_compiled_call`` for a stand-in vision-language model: it compiles ``__call__``
    (merge included) rather than the text decoder."""
    from transformers import CompileConfig, PreTrainedModel

    def forward(*args, **kwargs):
        return None

    stand_in = types.SimpleNamespace(config=types.SimpleNamespace(model_type="llava"), __call__=forward,
                                     generation_config=None,
                                     _default_compile_config=lambda: CompileConfig(backend="eager"))
    compiled = original(PreTrainedModel, "get_compiled_call")(stand_in, None)
    return getattr(compiled, "_torchdynamo_orig_callable", None) is forward


def _note_encoded_images(original_fn, self, model_kwargs, *args, **kwargs):
    model_kwargs = original_fn(self, model_kwargs, *args, **kwargs)
    setattr(self, ENCODED_IMAGES, has_encoded_images(model_kwargs))
    return model_kwargs


def _text_decoder(model):
    getter = getattr(model, "get_decoder", None)
    decoder = getter() if callable(getter) else None
    if not isinstance(decoder, torch.nn.Module) or decoder is model or decoder is getattr(model, "model", None):
        return None  # no separate text decoder: nothing narrower to compile
    if "inputs_embeds" not in inspect.signature(decoder.forward).parameters:
        return None
    return decoder


def _call_with_compiled_decoder(model, decoder, compile_config):
    """``model.__call__`` with the text decoder's forward compiled for the duration of the call."""
    entry = getattr(model, "_hf_neuron_decoder_call", None)
    if entry is not None and entry[0] == compile_config and entry[1] is decoder:
        return entry[2]
    compiled_forward = torch.compile(decoder.forward, **_compile_options(compile_config))

    def call(*args, **kwargs):
        decoder.forward = compiled_forward
        try:
            return model(*args, **kwargs)
        finally:
            del decoder.forward

    setattr(call, recompile_limit._MARK, True)  # built with its own limit: not to be compiled again
    model._hf_neuron_decoder_call = (compile_config, decoder, call)
    return call


def _compile_the_decoder_for_images(original_fn, self, compile_config):
    if not getattr(self, ENCODED_IMAGES, False) or not model_on_neuron(self):
        return original_fn(self, compile_config)
    decoder = _text_decoder(self)
    if decoder is None:
        return original_fn(self, compile_config)
    return _call_with_compiled_decoder(self, decoder, compile_config or _compile_config(self))


@fix(DECODER_FIX, "transformers", _compiles_the_whole_forward, waits_for="transformers.modeling_utils",
     modality="image")
def patch_compile_the_decoder() -> None:
    """Prompts with images compile a graph per count of image tokens in a prefill chunk.

    ``generate`` compiles a vision-language model's whole forward, which merges the chunk's image
    features into its token embeddings: the features are as many rows as the chunk holds placeholder
    tokens, so each count (and a chunk with none) is another graph, and the models' check that the
    counts agree breaks the graph. Detected by asking upstream's ``get_compiled_call`` for a stand-in
    vision-language model: it compiles the whole ``__call__``. Patch: while a ``generate`` call on a
    neuron device has encoded images, its compiled call runs the forward with only the text decoder
    (``get_decoder()``) compiled; the decoder takes the merged embeddings, whose shape is the chunk's
    whatever it holds. Prompts without images keep upstream's compiled forward.
    """
    from transformers import PreTrainedModel
    from transformers.generation.utils import GenerationMixin

    wrap(DECODER_FIX, GenerationMixin, "_prepare_multimodal_encoder_kwargs_for_generation", _note_encoded_images)
    wrap(DECODER_FIX, PreTrainedModel, "get_compiled_call", _compile_the_decoder_for_images)
