"""The prefill schedule: how a prompt is cut into chunks of the prefill buckets (pure lengths, no model)."""

import pytest

from hf_neuron.transformers.generation.prefill_schedule import check_prefill_buckets, prefill_buckets, schedule_prefill


def test_a_prompt_that_fits_is_left_padded_to_the_fewest_positions():
    assert schedule_prefill(10, (16,), room=46).chunks == (16,)
    schedule = schedule_prefill(700, (64, 512), room=1017)
    assert (schedule.padding, schedule.chunks) == (4, (512, 64, 64, 64))
    assert schedule.positions == 704
    # fewest positions first, then fewest forwards: 5 tokens take one 64 chunk, not 5 of a 1-token bucket
    assert schedule_prefill(5, (1, 64), room=100).chunks == (1, 1, 1, 1, 1)
    assert schedule_prefill(64, (1, 64), room=100).chunks == (64,)


def test_a_prompt_too_long_to_pad_overlaps_its_last_chunk_when_the_cache_rewinds():
    # 50 tokens, 3 new, 48 + ... : padding to 64 does not fit a 52-slot cache (room 50)
    schedule = schedule_prefill(50, (16,), room=50, rewindable=True)
    assert schedule.chunks == (16, 16, 16, 16) and schedule.overlap == 14 and schedule.decode_tail == 0
    assert schedule.head + 14 == 64 - 0 and schedule.positions == 64


def test_otherwise_the_rest_runs_through_the_decode_graph():
    schedule = schedule_prefill(50, (16,), room=50)
    assert schedule.chunks == (16, 16, 16) and schedule.decode_tail == 2 and schedule.positions == 50
    # shorter than every bucket and no room to pad: every token is a decode step
    assert schedule_prefill(30, (64, 512), room=40, rewindable=True).decode_tail == 30


def test_without_a_pad_token_only_exact_sums_are_padded_to():
    assert schedule_prefill(48, (16,), can_pad=False).chunks == (16, 16, 16)
    assert schedule_prefill(50, (16,), can_pad=False).decode_tail == 2


def test_a_cache_that_cannot_resume_gets_one_chunk_size():
    schedule = schedule_prefill(600, (64, 512), one_size=True)
    assert set(schedule.chunks) == {64} and schedule.padding == 40


def test_every_length_that_fits_uses_only_the_buckets():
    for buckets in [(16,), (4, 16), (8, 12)]:
        for rewindable in (False, True):
            for length in range(1, 46):
                schedule = schedule_prefill(length, buckets, room=46, rewindable=rewindable)
                assert set(schedule.chunks) <= set(buckets)
                assert schedule.padding + length <= 46
                assert schedule.head + schedule.decode_tail == length + schedule.padding


@pytest.mark.parametrize("value, message", [
    (0, "positive"), ([0, 16], "positive"), ([16, -4], "positive"), ("512", "an int or a list"),
    ([16, 16], "repeats"), ([], "positive"), (True, "an int or a list"),
])
def test_bad_buckets_say_what_to_pass(value, message):
    with pytest.raises(ValueError, match=message):
        prefill_buckets(value)


def test_a_bucket_longer_than_the_cache_is_refused():
    assert check_prefill_buckets([512, 64], 1024) == (64, 512)
    with pytest.raises(ValueError, match="longer than max_cache_len=256"):
        check_prefill_buckets([64, 512], 256)
