"""The producer snapshot's bytes (`cluster.producer_snapshot`), pure: what is encoded decodes to
the same table; a torn file, a checksum mismatch, a foreign body and an unknown format are
refused by name; a format-1 snapshot (before timestamps) is upgraded."""

from __future__ import annotations

import msgpack
import pytest
import xxhash

from cluster.producer_snapshot import (
    FORMAT,
    ProducerSnapshot,
    SnapshotError,
    UnknownSnapshotFormat,
    decode_snapshot,
    encode_snapshot,
)
from cluster.producers import BatchRef, ProducerTable


def _table() -> ProducerTable:
    table = ProducerTable()
    table.note(7, 0, BatchRef(10, 2, 5, 1_000))
    table.note(9, 0, BatchRef(11, 2, 1, 1_500))
    table.note(7, 5, BatchRef(12, 3, 2, 2_000))  # 7 wrote last: the most recent producer
    return table


def _file(body: object) -> bytes:
    packed: bytes = msgpack.packb(body)
    return xxhash.xxh3_64_digest(packed) + packed


def test_a_snapshot_round_trips_to_the_same_table() -> None:
    table = _table()
    data = encode_snapshot(ProducerSnapshot(12, 3, table.clock_ms, table.copy_rows()))
    saved = decode_snapshot(data)
    assert (saved.format, saved.index, saved.term, saved.clock_ms) == (FORMAT, 12, 3, 2_000)
    clock_ms, dumped = saved.dated(99)  # format 2 carries its own clock and timestamps
    again = ProducerTable()
    again.load(dumped, clock_ms)
    assert again.dump() == table.dump() and again.clock_ms == table.clock_ms
    assert again.lookup(7, 5) == BatchRef(12, 3, 2, 2_000)
    assert [pid for pid, _ in again.copy_rows()] == [9, 7]  # recency kept: 9 is evicted first


def test_an_empty_table_round_trips() -> None:
    saved = decode_snapshot(encode_snapshot(ProducerSnapshot(1, 1, 0, [])))
    assert (saved.index, saved.term, saved.clock_ms, saved.dumped) == (1, 1, 0, [])


@pytest.mark.parametrize("cut", [0, 3, 7])
def test_a_file_torn_inside_its_checksum_is_refused(cut: int) -> None:
    data = encode_snapshot(ProducerSnapshot(12, 3, 0, _table().copy_rows()))
    with pytest.raises(SnapshotError, match=f"snapshot of {cut} bytes is torn"):
        decode_snapshot(data[:cut])


def test_a_file_torn_in_its_body_fails_its_checksum() -> None:
    data = encode_snapshot(ProducerSnapshot(12, 3, 0, _table().copy_rows()))
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        decode_snapshot(data[:-1])


def test_a_flipped_bit_fails_the_checksum() -> None:
    data = bytearray(encode_snapshot(ProducerSnapshot(12, 3, 0, _table().copy_rows())))
    data[len(data) // 2] ^= 0x10
    with pytest.raises(SnapshotError, match=r"checksum mismatch: [0-9a-f]{16} saved"):
        decode_snapshot(bytes(data))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"format": 2}, "is not a list starting with a format"),
        ([], "is not a list starting with a format"),
        ([2, 12, 3, 0], "is not format 2"),
        ([2, 12, "3", 0, []], "is not format 2"),
        ([1, 12, 3, 0, []], "is not format 1"),
    ],
)
def test_a_body_of_another_shape_is_refused(body: object, says: str) -> None:
    with pytest.raises(SnapshotError, match=says):
        decode_snapshot(_file(body))


def test_a_body_that_is_not_msgpack_is_refused() -> None:
    body = b"\xc1 not msgpack"  # 0xc1 is never used by msgpack
    with pytest.raises(SnapshotError, match="is not msgpack"):
        decode_snapshot(xxhash.xxh3_64_digest(body) + body)


def test_an_unknown_format_is_refused_as_such() -> None:
    with pytest.raises(UnknownSnapshotFormat, match=r"format 3 is not readable: formats \(1, 2\)"):
        decode_snapshot(_file([3, 12, 3, 0, []]))


def test_a_format_1_snapshot_is_dated_at_the_entry_it_ends_at() -> None:
    """Before timestamps: [1, index, term, rows] with 4 fields a batch. Upgraded, every batch
    (and the clock) takes the timestamp the caller gives: the entry the snapshot ends at."""
    saved = decode_snapshot(_file([1, 12, 3, [[9, [[3, 11, 2, 1], [4, 12, 3, 1]]]]]))
    assert (saved.format, saved.index, saved.term, saved.clock_ms) == (1, 12, 3, None)
    clock_ms, dumped = saved.dated(5_000)
    assert clock_ms == 5_000
    table = ProducerTable()
    table.load(dumped, clock_ms)
    assert table.lookup(9, 3) == BatchRef(11, 2, 1, 5_000)
    assert table.lookup(9, 4) == BatchRef(12, 3, 1, 5_000)
    assert table.clock_ms == 5_000 and table.next_sequence(9) == 5
