"""The idempotent-producer table: retries found, truncation forgotten, windows bounded."""

from __future__ import annotations

from cluster.producers import BatchRef, ProducerTable


def test_a_retry_finds_the_first_copy() -> None:
    table = ProducerTable()
    table.note(7, 0, BatchRef(10, 2, 5))
    table.note(7, 5, BatchRef(11, 2, 5))
    assert table.lookup(7, 0) == BatchRef(10, 2, 5)
    assert table.lookup(7, 5) == BatchRef(11, 2, 5)
    assert table.lookup(7, 10) is None
    assert table.lookup(8, 0) is None
    assert table.lookup(0, 0) is None  # producer id 0: not idempotent


def test_the_next_sequence_follows_the_latest_batch() -> None:
    table = ProducerTable()
    assert table.next_sequence(7) is None and table.next_sequence(0) is None
    table.note(7, 0, BatchRef(10, 2, 5))
    table.note(7, 5, BatchRef(11, 2, 3))
    assert table.next_sequence(7) == 8
    table.forget_from(11)
    assert table.next_sequence(7) == 5


def test_truncated_batches_are_forgotten() -> None:
    table = ProducerTable()
    for n in range(5):
        table.note(1, n * 10, BatchRef(100 + n, 3, 10))
    table.forget_from(102)
    assert table.lookup(1, 10) == BatchRef(101, 3, 10)
    assert table.lookup(1, 20) is None
    table.forget_from(0)
    assert len(table) == 0


def test_windows_and_producer_counts_are_bounded() -> None:
    table = ProducerTable(window=3, max_producers=2)
    for n in range(5):
        table.note(1, n, BatchRef(n + 1, 1, 1))
    assert table.lookup(1, 1) is None and table.lookup(1, 2) is not None
    table.note(2, 0, BatchRef(9, 1, 1))
    table.note(3, 0, BatchRef(10, 1, 1))
    assert table.lookup(1, 4) is None  # the least recently used producer was dropped
    assert table.lookup(3, 0) == BatchRef(10, 1, 1)
