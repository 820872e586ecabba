"""The `__groups` records (`cluster.groups_log.batches`): a round's entries become record batches
in order, keyed by group (a tick's entries unkeyed), split at the size bound but never inside an
entry; and the lag a coordinator reports (`cluster.groups_gauges.group_lag`)."""

from __future__ import annotations

import pytest

from cluster.groups_gauges import group_lag
from cluster.groups_log import batches
from proto.records import decode_batch


def test_entries_become_batches_in_order_keyed_by_group() -> None:
    entries = [("billing", b"a" * 10), (None, b"tick"), ("audit", b"b" * 10)]
    ((batch, count),) = batches(entries, timestamp_ms=1234)
    records = decode_batch(batch, 0)
    assert count == 3
    assert [(r.key, r.value) for r in records] == [
        (b"billing", b"a" * 10),
        (None, b"tick"),
        (b"audit", b"b" * 10),
    ]
    assert {r.timestamp_ms for r in records} == {1234}


def test_a_large_round_is_split_between_entries_never_inside_one() -> None:
    entries = [("g", bytes([n]) * 300) for n in range(10)] + [("big", b"x" * 5000)]
    split = list(batches(entries, timestamp_ms=0, max_bytes=1000))
    assert [count for _, count in split] == [3, 3, 3, 1, 1]
    values = [r.value for batch, _ in split for r in decode_batch(batch, 0)]
    assert values == [value for _, value in entries]


def test_an_entry_larger_than_the_bound_goes_alone() -> None:
    entries = [("big", b"x" * 5000), ("g", b"y")]
    split = list(batches(entries, timestamp_ms=0, max_bytes=1000))
    assert [count for _, count in split] == [1, 1]
    assert [decode_batch(batch, 0)[0].value for batch, _ in split] == [b"x" * 5000, b"y"]


def test_nothing_to_write_is_no_batch() -> None:
    assert list(batches([], timestamp_ms=0)) == []


@pytest.mark.parametrize(
    ("high_watermark", "log_start", "committed", "lag"),
    [(10, 0, 4, 6), (10, 3, None, 7), (10, 0, 10, 0), (10, 0, 12, 0)],
)
def test_lag_counts_from_the_commit_or_from_the_log_start(
    high_watermark: int, log_start: int, committed: int | None, lag: int
) -> None:
    assert group_lag(high_watermark, log_start, committed) == lag
