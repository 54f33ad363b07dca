"""Batch buckets: ``generate`` pads a batch to the next of a few sizes, so a server compiles only those.

On Neuron every batch size is its own set of graphs (a compile of minutes each); a server whose
request batches have any size from 1 to 8 would compile eight sets. With ``batch_buckets=[1, 4, 8]``
(a ``generate`` keyword, or an attribute of the generation config) a batch of 3 rows runs as 4: the
extra rows repeat the last real row (a real prompt, so every op sees ordinary inputs) and are dropped
from what ``generate`` returns. Rows are independent in a decoder's forward, so the real rows' tokens
equal the unpadded run's. Opt-in: without it each batch size compiles its own graphs, as upstream.
"""

from __future__ import annotations

import torch

from hf_neuron.devices import model_on_neuron
from hf_neuron.patching import fix, wrap
from hf_neuron.transformers.generation.prefill_schedule import distinct_sizes

FIX_NAME = "generate-batch-buckets"
#: The generation-config attribute (and ``generate`` keyword) that holds the batch sizes.
ATTRIBUTE = "batch_buckets"
#: Per-row text inputs of ``generate`` that are padded with the batch.
ROW_INPUTS = ("input_ids", "inputs", "attention_mask", "position_ids", "token_type_ids", "inputs_embeds")


def check_batch_buckets(value) -> tuple[int, ...]:
    """The batch sizes of a ``batch_buckets`` value, ascending; ``ValueError`` (what to pass) otherwise."""
    return distinct_sizes(value, "batch_buckets", "[1, 4, 8]")


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds ``rows`` rows; ``ValueError`` when the batch is larger than all."""
    for size in buckets:
        if size >= rows:
            return size
    raise ValueError(
        f"a batch of {rows} rows is larger than the largest of batch_buckets {list(buckets)}: add a bucket of at "
        f"least {rows} (each bucket compiles its own graphs) or split the batch"
    )


def _requested_buckets(model, generation_config, kwargs):
    if ATTRIBUTE in kwargs:
        return kwargs.pop(ATTRIBUTE)
    for config in (generation_config, model.generation_config):
        value = getattr(config, ATTRIBUTE, None) if config is not None else None
        if value is not None:
            return value
    return None


def _pad_rows(tensor: torch.Tensor, padded: int) -> torch.Tensor:
    extra = padded - tensor.shape[0]
    return torch.cat([tensor, tensor[-1:].expand(extra, *tensor.shape[1:])], dim=0)


def _real_rows(value, padded_rows: int, real_rows: int):
    """``value`` (a tensor or nested outputs) with the padding rows dropped wherever dim 0 has them."""
    if isinstance(value, torch.Tensor):
        return value[:real_rows] if value.dim() and value.shape[0] == padded_rows else value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_real_rows(v, padded_rows, real_rows) for v in value)
    if isinstance(value, list):
        return [_real_rows(v, padded_rows, real_rows) for v in value]
    return value


def _generate_in_batch_buckets(original, self, inputs=None, generation_config=None, *args, **kwargs):
    value = _requested_buckets(self, generation_config, kwargs)
    if value is None or not model_on_neuron(self):
        return original(self, inputs, generation_config, *args, **kwargs)
    buckets = check_batch_buckets(value)
    given = {"inputs": inputs, **{k: kwargs.get(k) for k in ROW_INPUTS if k != "inputs"}}
    first = next((v for v in given.values() if isinstance(v, torch.Tensor)), None)
    if first is None:
        return original(self, inputs, generation_config, *args, **kwargs)
    rows = first.shape[0]
    padded = bucket_for(rows, buckets)
    if padded == rows:
        return original(self, inputs, generation_config, *args, **kwargs)
    others = sorted(k for k, v in kwargs.items()
                    if k not in ROW_INPUTS and isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == rows)
    if others or kwargs.get("streamer") is not None:
        what = f"the inputs {others}" if others else "a streamer"
        raise ValueError(
            f"batch_buckets pads batches of text inputs ({', '.join(ROW_INPUTS[2:])}) only; this call also has "
            f"{what}: pad the batch to {padded} rows yourself or leave batch_buckets unset for it"
        )
    if isinstance(inputs, torch.Tensor):
        inputs = _pad_rows(inputs, padded)
    for key in ROW_INPUTS[2:] + ("input_ids",):
        if isinstance(kwargs.get(key), torch.Tensor):
            kwargs[key] = _pad_rows(kwargs[key], padded)
    outputs = original(self, inputs, generation_config, *args, **kwargs)
    sequences = outputs if isinstance(outputs, torch.Tensor) else outputs.sequences
    per_row = sequences.shape[0] // padded  # num_return_sequences (or beams returned) per input row
    if isinstance(outputs, torch.Tensor):
        return outputs[: rows * per_row]
    for key, item in list(outputs.items()):
        if key not in ("past_key_values", "cache"):
            outputs[key] = _real_rows(item, padded * per_row, rows * per_row)
    return outputs


def _generate_has_no_batch_buckets() -> bool:
    from transformers import GenerationConfig

    return not hasattr(GenerationConfig(), ATTRIBUTE)


@fix(FIX_NAME, "transformers", _generate_has_no_batch_buckets, waits_for="transformers.generation.utils")
def patch_generate_batch_buckets() -> None:
    """Every batch size a server sees is its own set of compiled graphs on Neuron.

    Gap: ``generate`` compiles for the batch it is given; upstream has no way to pad a batch to one
    of a few sizes. Detected by the absence of a ``batch_buckets`` field in ``GenerationConfig``.
    Patch: for a model on Neuron, ``generate(batch_buckets=[...])`` (or ``batch_buckets`` on the
    generation config) pads the text inputs' rows to the smallest bucket that holds the batch by
    repeating the last row, and returns the real rows only; a batch larger than every bucket, or
    bad sizes, raise a ``ValueError`` before anything runs.
    """
    from transformers.generation.utils import GenerationMixin

    wrap(FIX_NAME, GenerationMixin, "generate", _generate_in_batch_buckets)


__all__ = ["ATTRIBUTE", "bucket_for", "check_batch_buckets"]
