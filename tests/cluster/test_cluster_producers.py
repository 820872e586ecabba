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
        replica.producers.note(producer, sequence, BatchRef(index, 1, 1))
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
            assert again.producers.next_sequence(9) == total - 1  # the scan, either way
            return again.producers.lookup(7, 0) == BatchRef(1, 1, 1)
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
