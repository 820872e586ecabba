"""An fsync never holds up a reader: the fields an event loop reads are lock-free, and reads
take only a lock that is never held across an fsync."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import FileHandles, LogConfig, SegmentedLog

SLOW_FSYNC_S = 0.5
READ_BOUND_S = 0.1  # far above a read's cost, far below the fsync's


def test_a_slow_fsync_does_not_block_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SegmentedLog(tmp_path / "log", LogConfig(segment_bytes=4096), handles=FileHandles(16))
    for n in range(20):
        log.append(b"r" * 300, 1, 2, n, sync=False)
    log.flush()
    log.append(b"new", 1, 1, 99, sync=False)

    in_fsync = threading.Event()
    real = os.fsync

    def slow(fd: int) -> None:
        in_fsync.set()
        time.sleep(SLOW_FSYNC_S)
        real(fd)

    monkeypatch.setattr(os, "fsync", slow)
    writer = threading.Thread(target=log.flush)
    writer.start()
    try:
        assert in_fsync.wait(5), "the flush never reached its fsync"
        reads: dict[str, Callable[[], object]] = {
            "last_index": lambda: log.last_index,
            "next_offset": lambda: log.next_offset,
            "durable_index": lambda: log.durable_index,
            "first_offset": lambda: log.first_offset,
            "offset_after": lambda: log.offset_after(10),
            "entry_meta": lambda: log.entry_meta(21),
            "term_at": lambda: log.term_at(5),
            "read": lambda: bytes(log.read(3).data),
            "read_from": lambda: len(list(log.read_from(1, 10_000))),
            "find_offset": lambda: log.find_offset(7),
        }
        waited = {}
        for name, read in reads.items():
            start = time.monotonic()
            read()
            waited[name] = time.monotonic() - start
        assert {name: s for name, s in waited.items() if s > READ_BOUND_S} == {}
        assert writer.is_alive(), "the fsync ended before the reads: the test proved nothing"
        assert log.durable_index == 20  # not yet advanced: the fsync has not returned
    finally:
        writer.join(10)
    assert log.durable_index == 21
    log.close()


def test_a_reader_during_a_segment_roll_finds_offsets(tmp_path: Path) -> None:
    """A segment roll makes the new, empty segment visible before its first entry is written
    (`_segment_for_append`, then the write): a `find_offset` in that window (a Fetch's reader
    thread) must not look into the empty segment (it raised IndexError: a client's Fetch got
    UNKNOWN)."""
    log = SegmentedLog(tmp_path / "log", LogConfig(segment_bytes=4096), handles=FileHandles(16))
    try:
        for n in range(3):
            log.append(b"r" * 1000, 1, 1, n, sync=False)
        log._segment_for_append(4096)  # the roll, as an append starts it, before the write
        assert [log.find_offset(offset) for offset in range(3)] == [1, 2, 3]
    finally:
        log.close()
