"""How a prompt is cut into prefill chunks so that every prompt that fits the cache reuses the same graphs.

On Neuron each distinct chunk length is a graph (a compile of minutes). ``generate`` therefore runs
the prefill in chunks whose lengths come from a small fixed set, the *prefill buckets*
(``prefill_chunk_size``: one size such as ``512``, or a list such as ``[64, 512]``, the default on
Neuron), each one prefill graph. For a prompt of ``length`` tokens the
schedule picks, in this order:

1. **Left padding.** The smallest total ``T >= length`` that is a sum of bucket sizes and still
   leaves room for the new tokens in the cache; the prompt is left padded to ``T`` (pad token, zero
   attention mask) and run as those chunks, largest first. Fewest positions computed, then fewest
   forwards.
2. **Overlap.** When no such ``T`` fits (a long prompt close to ``max_cache_len``) and the cache can
   be rewound (``Cache.is_croppable``: every layer a full-attention static layer), the longest head
   of the prompt that is a sum of bucket sizes is run as chunks, the cache is rewound by a few
   positions and the last chunk re-runs them together with the rest of the prompt: the same cache
   slots are written with the same keys and values.
3. **Decode tail.** Otherwise (recurrent or sliding-window layers cannot be rewound) the rest of the
   prompt after that head runs through the decode graph, one token per forward.

Every path computes the prompt's exact cache and next-token logits and uses only the bucket graphs
and the decode graph. The schedule is a pure function of lengths, so ``hf-neuron plan``, the
benchmarks and the tests can ask it what a prompt costs without running a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class PrefillSchedule:
    """The prefill of one prompt: ``padding`` tokens on the left, ``chunks`` (lengths, in order), of
    which the last re-runs ``overlap`` positions already in the cache, then ``decode_tail`` tokens one
    at a time."""

    length: int
    padding: int
    chunks: tuple[int, ...]
    overlap: int = 0
    decode_tail: int = 0

    @property
    def positions(self) -> int:
        """Positions the device computes for one row (padding and re-run positions included)."""
        return sum(self.chunks) + self.decode_tail

    @property
    def head(self) -> int:
        """Tokens of the padded prompt covered by the chunks before any overlap."""
        return sum(self.chunks) - self.overlap


def distinct_sizes(value, name: str, example: str) -> tuple[int, ...]:
    """The sizes of a bucket setting (an int, or a list of ints), ascending.

    Raises ``ValueError`` naming the setting ``name`` and showing ``example`` for sizes that are not
    positive integers, or that repeat. Shared by the prefill buckets and the batch buckets.
    """
    sizes = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise ValueError(f"{name} must be an int or a list of ints, e.g. {example}; got {value!r}")
    sizes = list(sizes)
    if not sizes or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in sizes):
        raise ValueError(f"{name} must be a positive int or a list of positive ints, e.g. {example}; got {value!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{name} {value!r} repeats a size: give each size once, e.g. {example}")
    return tuple(sorted(sizes))


def prefill_buckets(value) -> tuple[int, ...]:
    """The chunk sizes of a ``prefill_chunk_size`` value (an int, or a list of ints), ascending;
    ``ValueError`` (what is wrong, what to pass) otherwise."""
    return distinct_sizes(value, "prefill_chunk_size", "512 or [64, 512]")


def check_prefill_buckets(value, max_cache_len: int | None) -> tuple[int, ...]:
    """:func:`prefill_buckets`, and no bucket longer than the cache it fills."""
    buckets = prefill_buckets(value)
    if max_cache_len is not None and buckets[-1] > max_cache_len:
        raise ValueError(
            f"prefill_chunk_size {value!r} has a bucket of {buckets[-1]} tokens, longer than max_cache_len="
            f"{max_cache_len}: a chunk is written into the cache whole. Pass sizes of at most {max_cache_len} "
            f"or a larger max_cache_len."
        )
    return buckets


def _fewest_chunks(buckets: Sequence[int], limit: int) -> list[int | None]:
    """``fewest[t]``: the fewest chunks whose lengths sum to exactly ``t`` (None: no sum), for t <= limit."""
    fewest: list[int | None] = [0] + [None] * limit
    for total in range(1, limit + 1):
        best = None
        for size in buckets:
            if size <= total and fewest[total - size] is not None:
                candidate = fewest[total - size] + 1
                best = candidate if best is None or candidate < best else best
        fewest[total] = best
    return fewest


def _chunks_summing_to(total: int, buckets: Sequence[int], fewest: list[int | None]) -> tuple[int, ...]:
    chunks = []
    while total:
        size = next(s for s in sorted(buckets, reverse=True)
                    if s <= total and fewest[total - s] is not None and fewest[total - s] + 1 == fewest[total])
        chunks.append(size)
        total -= size
    return tuple(sorted(chunks, reverse=True))


def schedule_prefill(
    length: int,
    buckets: Sequence[int],
    *,
    room: int | None = None,
    can_pad: bool = True,
    rewindable: bool = False,
    one_size: bool = False,
) -> PrefillSchedule:
    """The prefill of a ``length``-token prompt over the chunk sizes ``buckets`` (see the module docstring).

    ``room``: the longest padded prompt the cache takes (``capacity - max_new_tokens + 1``; None when
    no layer runs out of slots). ``can_pad``: a pad token exists and the prompt is text only.
    ``rewindable``: the cache can be rewound (overlap). ``one_size``: every chunk must have the same
    length (a cache that cannot resume a prefill keeps one call of one size).
    """
    if length < 1:
        raise ValueError(f"a prompt of {length} tokens has nothing to prefill")
    buckets = tuple(sorted(buckets))
    if one_size:
        return _one_size_schedule(length, buckets, room, can_pad)
    limit = length + buckets[-1]
    fewest = _fewest_chunks(buckets, limit)
    top = length if not can_pad else limit if room is None else min(limit, room)
    for total in range(length, top + 1):
        if fewest[total] is not None:
            return PrefillSchedule(length, total - length, _chunks_summing_to(total, buckets, fewest))
    head = max(t for t in range(length + 1) if fewest[t] is not None)
    chunks = _chunks_summing_to(head, buckets, fewest)
    rest = length - head
    if rewindable:
        fitting = [b for b in buckets if rest <= b <= length]
        if fitting:
            return PrefillSchedule(length, 0, chunks + (fitting[0],), overlap=fitting[0] - rest)
    return PrefillSchedule(length, 0, chunks, decode_tail=rest)


def _one_size_schedule(length, buckets, room, can_pad) -> PrefillSchedule:
    options = []
    for size in buckets:
        padded = -(-length // size) * size
        if can_pad and (room is None or padded <= room):
            options.append((padded, -size, PrefillSchedule(length, padded - length, (size,) * (padded // size))))
        elif length % size == 0:
            options.append((length, -size, PrefillSchedule(length, 0, (size,) * (length // size))))
    if options:
        return min(options, key=lambda option: option[:2])[2]
    size = buckets[-1] if length >= buckets[-1] else buckets[0]
    head = length // size * size
    return PrefillSchedule(length, 0, (size,) * (head // size), decode_tail=length - head)


__all__ = ["PrefillSchedule", "check_prefill_buckets", "distinct_sizes", "prefill_buckets", "schedule_prefill"]
