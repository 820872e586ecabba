"""Bounded open files, group commit and retention."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import (
    FileHandles,
    FsyncPolicy,
    IndexOutOfRange,
    LogConfig,
    SegmentedLog,
    sync_logs,
)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_logs_hold_a_bounded_number_of_files(tmp_path: Path) -> None:
    handles = FileHandles(max_open=16)
    baseline = _open_fds()
    logs = [SegmentedLog(tmp_path / f"p{n}", LogConfig(), handles=handles) for n in range(300)]
    for round_ in range(3):
        for number, log in enumerate(logs):
            log.append(f"{number}:{round_}".encode(), 1, 1, 0, sync=False)
    assert handles.open_count <= 16
    assert _open_fds() - baseline <= 16 + 2
    assert sync_logs(logs) == 300
    assert all(log.durable_index == 3 for log in logs)
    for number, log in enumerate(logs):
        assert bytes(log.read(3).data) == f"{number}:2".encode()
        log.close()
    assert sync_logs([]) == 0


def test_eviction_closes_the_least_recently_used_clean_files_first(tmp_path: Path) -> None:
    """Over the cap, the least recently used unpinned clean file closes; a dirty one only when
    no clean one is left, and a pinned one never (the eviction looks only as far as it must)."""
    handles = FileHandles(max_open=3)
    paths = [str(tmp_path / name) for name in ("a", "b", "c", "d", "e", "f")]
    with handles.pin(paths[0], write=True):  # a: dirty, least recently used
        pass
    with handles.pin(paths[1]), handles.pin(paths[2]):  # b, c: clean
        pass
    with handles.pin(paths[3]):  # over the cap: b (the oldest clean) goes, not a (dirty)
        pass
    assert set(handles._open) == {paths[0], paths[2], paths[3]}
    with handles.pin(paths[2]), handles.pin(paths[4]):  # c pinned as e comes: d goes
        assert set(handles._open) == {paths[0], paths[2], paths[4]}
    handles.fsync(paths[0])  # a clean now, and the least recently used: it goes next
    with handles.pin(paths[5], write=True):
        pass
    assert set(handles._open) == {paths[2], paths[4], paths[5]}
    for path in paths[4:]:  # only dirty ones left to close: they are fsynced, then closed
        with handles.pin(path, write=True):
            pass
    with handles.pin(paths[0]), handles.pin(paths[1]), handles.pin(paths[3]):
        assert set(handles._open) == {paths[0], paths[1], paths[3]}
    assert handles.open_count == 3


def test_group_commit_syncs_only_dirty_logs(tmp_path: Path) -> None:
    config = LogConfig(fsync=FsyncPolicy.parse("never"))
    logs = [SegmentedLog(tmp_path / f"p{n}", config) for n in range(4)]
    logs[1].append(b"a", 1, 1, 0)
    logs[3].append(b"b", 1, 1, 0)
    assert [log.durable_index for log in logs] == [0, 0, 0, 0]
    assert sync_logs(logs) == 2
    assert [log.durable_index for log in logs] == [0, 1, 0, 1]
    for log in logs:
        log.close()


def test_retention_by_age_respects_the_commit_point(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4096, retention_ms=60_000)
    with SegmentedLog(tmp_path / "log", config) as log:
        for n in range(100):
            log.append(b"r" * 400, 1, 1, timestamp_ms=1_000_000 + n)
        segments = log.segment_count
        assert log.apply_retention(now_ms=1_000_100) == 0  # nothing is old yet
        assert log.apply_retention(now_ms=10**9, keep_from=60) == 59  # old, but not committed
        assert log.first_index == 60
        assert log.segment_count < segments
        removed = log.apply_retention(now_ms=10**9)
        assert log.segment_count == 1  # the active segment is never removed
        assert log.first_index == 60 + removed
        assert bytes(log.read(log.last_index).data) == b"r" * 400


def test_retention_by_size_keeps_at_least_the_limit(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4096, retention_bytes=8192)
    with SegmentedLog(tmp_path / "log", config) as log:
        for n in range(100):
            log.append(b"r" * 400, 1, 1, timestamp_ms=n)
        removed = log.apply_retention(now_ms=0)
        assert removed > 0
        assert log.first_index == removed + 1
        assert 8192 <= log.size_bytes < 8192 + 4096
        assert log.apply_retention(now_ms=0) == 0


def test_entry_meta_and_offset_after_answer_from_memory(tmp_path: Path) -> None:
    with SegmentedLog(tmp_path / "log") as log:
        log.append(b"a", 1, 3, 0)
        log.append(b"", 2, 0, 0)
        log.append(b"b", 2, 4, 0)
        assert log.entry_meta(1) == (1, 0, 3)
        assert log.entry_meta(2) == (2, 3, 0)
        assert [log.offset_after(i) for i in (0, 1, 2, 3)] == [0, 3, 3, 7]
        log.truncate_prefix(3)
        assert log.offset_after(2) == 3
        with pytest.raises(IndexOutOfRange):
            log.entry_meta(2)
