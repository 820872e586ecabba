"""The idempotent-producer table: retries found, truncation forgotten, windows bounded."""

from __future__ import annotations

from pathlib import Path

import msgpack
import xxhash
from harness import open_replica

from cluster.producers import BatchRef, ProducerTable
from cluster.replica import PRODUCER_SNAPSHOT, Replica
from proto.records import encode_batch
from raft.types import Entry, EntryKind


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


def _replica(directory: Path) -> Replica:
    return open_replica(directory, node_id="a")


def test_a_restart_loads_the_saved_table_only_while_it_matches_the_log(tmp_path: Path) -> None:
    """Producer P wrote entry 1; 6,000 entries of Q followed, more than a restart scans. The
    saved table still knows P; a torn snapshot, or one the log no longer matches, is ignored
    (the bounded scan instead, as without one)."""
    replica = _replica(tmp_path)
    total = 6000
    entries = []
    for index in range(1, total + 1):
        producer, sequence = (7, 0) if index == 1 else (9, index - 2)
        batch = encode_batch([(None, b"v", None, 0)], producer_id=producer, base_sequence=sequence)
        entries.append(Entry(index, 1, EntryKind.NORMAL, 1, batch))
        replica.idempotence.written(producer, sequence, BatchRef(index, 1, 1))
    replica.log.append(entries)
    replica.segmented.flush()
    snapshot = replica.producer_snapshot()
    assert snapshot is not None
    replica.save_snapshot(snapshot)
    replica.close()
    path = tmp_path / "t" / "0" / PRODUCER_SNAPSHOT

    def reopened_knows_p() -> bool:
        again = _replica(tmp_path)
        try:
            assert again.idempotence.table.next_sequence(9) == total - 1  # the scan, either way
            return again.idempotence.table.lookup(7, 0) == BatchRef(1, 1, 1)
        finally:
            again.close()

    assert reopened_knows_p()
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # torn
    assert not reopened_knows_p()
    body = msgpack.unpackb(good[8:])
    body[2] = 2  # a term the log does not have at that index: rewritten since
    forged = msgpack.packb(body)
    path.write_bytes(xxhash.xxh3_64_digest(forged) + forged)
    assert not reopened_knows_p()
    path.unlink()
    assert not reopened_knows_p()  # what a restart knew before snapshots


def test_producers_expire_by_the_time_the_log_carries() -> None:
    """A producer whose latest batch is older than `expiration_ms`, measured by the newest entry
    timestamp noted (the leader's time, replicated in the log: every replica and every restart
    decides alike), is unknown; the clock never runs back."""
    table = ProducerTable(expiration_ms=1000)
    table.note(7, 0, BatchRef(1, 1, 5, 100))
    table.note(8, 0, BatchRef(2, 1, 1, 600))
    table.note(9, 0, BatchRef(3, 1, 1, 0))
    table.note(9, 1, BatchRef(4, 1, 1, 150))  # its latest batch decides: known until 1150
    assert table.next_sequence(7) == 5
    table.note(0, 0, BatchRef(3, 1, 1, 1101))  # a non-idempotent batch moves the clock too
    assert table.clock_ms == 1101
    assert table.lookup(7, 0) is None and table.next_sequence(7) is None  # 1001 ms idle
    assert table.lookup(8, 0) == BatchRef(2, 1, 1, 600)
    assert table.lookup(9, 0) == BatchRef(3, 1, 1, 0)
    table.note(8, 1, BatchRef(4, 1, 1, 900))  # a leader whose clock is behind: no step back
    assert table.clock_ms == 1101
    # an expired producer that writes again starts afresh: its old batches are not found
    table.note(7, 5, BatchRef(5, 1, 1, 1200))
    assert table.lookup(7, 0) is None and table.next_sequence(7) == 6


def test_expiry_does_not_depend_on_when_expired_producers_are_dropped() -> None:
    """The same entries give the same answers whether the expired producers were physically
    dropped (bounded memory) or not yet, and after a dump and load (a restart)."""
    entries = [(pid, 0, BatchRef(n + 1, 1, 1, n * 10)) for n, pid in enumerate(range(1, 400))]
    tables = [ProducerTable(expiration_ms=1000), ProducerTable(expiration_ms=1000)]
    for pid, sequence, ref in entries:
        tables[0].note(pid, sequence, ref)
    for pid, sequence, ref in entries[:200]:
        tables[1].note(pid, sequence, ref)
    reloaded = ProducerTable(expiration_ms=1000)
    reloaded.load(tables[1].dump())
    for pid, sequence, ref in entries[200:]:
        reloaded.note(pid, sequence, ref)
    assert len(tables[0]) < 150  # expired producers are dropped as the log goes on
    for pid in range(1, 400):
        answers = {t.next_sequence(pid) for t in (tables[0], reloaded)}
        assert len(answers) == 1, pid
    assert tables[0].next_sequence(1) is None and tables[0].next_sequence(399) == 1
    assert reloaded.clock_ms == tables[0].clock_ms


def test_the_table_is_bounded_by_count_evicting_the_least_recently_written() -> None:
    table = ProducerTable(max_producers=3)
    for pid in (1, 2, 3):
        table.note(pid, 0, BatchRef(pid, 1, 1, pid))
    table.note(1, 1, BatchRef(4, 1, 1, 4))  # 1 wrote again: 2 is now the least recent
    table.note(4, 0, BatchRef(5, 1, 1, 5))
    assert len(table) == 3
    assert table.next_sequence(2) is None
    assert [table.next_sequence(pid) for pid in (1, 3, 4)] == [2, 1, 1]


def test_a_snapshot_is_saved_however_many_producers_wrote(tmp_path: Path) -> None:
    """12,000 producers (more than the old limit of 10,000, past which no snapshot was saved
    again): the snapshot is still made, and a restart finds the first producer in it."""
    replica = _replica(tmp_path)
    count = 12_000
    entries = []
    for index in range(1, count + 1):
        batch = encode_batch([(None, b"v", None, 0)], producer_id=index)
        entries.append(Entry(index, 1, EntryKind.NORMAL, 1, batch, timestamp_ms=index))
    replica.log.append(entries)
    replica.segmented.flush()
    for entry in entries:
        replica.idempotence.written(entry.index, 0, BatchRef(entry.index, 1, 1, entry.timestamp_ms))
    snapshot = replica.producer_snapshot()
    assert snapshot is not None
    replica.save_snapshot(snapshot)
    replica.close()
    again = _replica(tmp_path)
    try:
        assert again.idempotence.table.lookup(1, 0) == BatchRef(1, 1, 1, 1)
        assert len(again.idempotence.table) == count
    finally:
        again.close()


def test_a_snapshot_of_the_format_before_timestamps_still_loads(tmp_path: Path) -> None:
    """An upgrade: a format-1 snapshot (no timestamps) is loaded, its producers dated by the
    timestamp of the entry it ends at (so they expire a day after it, not at once)."""
    replica = _replica(tmp_path)
    batch = encode_batch([(None, b"v", None, 0)], producer_id=7)
    replica.log.append([Entry(1, 1, EntryKind.NORMAL, 1, batch, timestamp_ms=5000)])
    replica.segmented.flush()
    replica.close()
    # (what the saved table says of a producer 9 is told apart from what a scan would find)
    body = msgpack.packb([1, 1, 1, [[9, [[3, 1, 1, 1]]]]])
    (tmp_path / "t" / "0" / PRODUCER_SNAPSHOT).write_bytes(xxhash.xxh3_64_digest(body) + body)
    again = _replica(tmp_path)
    try:
        assert again.idempotence.table.lookup(9, 3) == BatchRef(1, 1, 1, 5000)
        assert again.idempotence.table.clock_ms == 5000
    finally:
        again.close()
