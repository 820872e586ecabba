"""Storage errors are fail-stop: a failed write or fsync is never retried, never forgotten, and
nothing after it advances `durable_index` (fsyncgate: after a failed fsync the kernel may have
dropped the dirty pages, so a retry would succeed without writing them)."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import FileHandles, HardState, LogConfig, SegmentedLog, StateJournal, StorageFailed

CONFIG = LogConfig(segment_bytes=8192, max_batch_bytes=4096)


class _FailingFsync:
    """Makes the next `failures` calls of `os.fsync` fail with `code`, as a failing disk would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failures: int, code: int) -> None:
        self.failures = failures
        self.code = code
        self.real: Callable[[int], None] = os.fsync
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(self.code, os.strerror(self.code))
        self.real(fd)


def test_a_failed_fsync_is_never_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16))
    log.append(b"a", 1, 1, 0)
    log.append(b"b", 1, 1, 0, sync=False)
    _FailingFsync(monkeypatch, 1, errno.EIO)
    with pytest.raises(OSError):
        log.flush()
    # the disk recovered; a retry would now succeed and claim entry 2 is durable
    with pytest.raises(StorageFailed) as caught:
        log.flush()
    assert caught.value.errno == errno.EIO
    assert log.durable_index == 1
    with pytest.raises(StorageFailed):
        log.append(b"c", 1, 1, 0)
    with pytest.raises(StorageFailed):
        log.truncate_from(2)
    assert log.durable_index == 1 and log.last_index == 2
    log.close()


def test_a_failed_fsync_is_logged_once_at_error_not_critical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The node's fail-stop hook logs the one CRITICAL line (`cluster.failstop`)."""
    log = SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16))
    log.append(b"a", 1, 1, 0, sync=False)
    _FailingFsync(monkeypatch, 1, errno.EIO)
    with caplog.at_level(logging.DEBUG), pytest.raises(OSError):
        log.flush()
    with pytest.raises(StorageFailed):
        log.flush()
    reports = [r for r in caplog.records if "takes no more writes" in r.getMessage()]
    assert [r.levelno for r in reports] == [logging.ERROR], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL], caplog.text
    log.close()


def test_a_failed_fsync_when_evicting_a_file_is_not_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handles = FileHandles(max_open=1)
    first = SegmentedLog(tmp_path / "first", CONFIG, handles=handles)
    second = SegmentedLog(tmp_path / "second", CONFIG, handles=handles)
    first.append(b"a", 1, 1, 0, sync=False)
    failing = _FailingFsync(monkeypatch, 1, errno.EIO)
    second.append(b"b", 1, 1, 0, sync=False)  # opening its file evicts first's (dirty) one
    assert failing.failures == 0, "the eviction fsynced first's file"
    # the old cache dropped first's dirty flag here: its flush fsynced nothing, and lied
    with pytest.raises(StorageFailed):
        first.flush()
    assert first.durable_index == 0
    second.flush()  # not second's failure
    assert second.durable_index == 1
    first.close()
    second.close()


def test_a_failed_write_stops_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16))
    log.append(b"a", 1, 1, 0)
    real = os.pwritev

    def full(fd: int, buffers: list[bytes], offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(StorageFailed) as caught:
        log.append(b"b", 1, 1, 0)
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "pwritev", real)
    with pytest.raises(StorageFailed):
        log.append(b"b", 1, 1, 0)
    with pytest.raises(StorageFailed):
        log.flush()
    assert (log.last_index, log.durable_index) == (1, 1)
    log.close()
    with SegmentedLog(tmp_path / "log", CONFIG, handles=FileHandles(16)) as reopened:
        assert reopened.last_index == 1


def test_a_failed_journal_fsync_is_never_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = StateJournal(tmp_path / "journal")
    journal.save_many({"g": HardState(1, "a", 0)})
    _FailingFsync(monkeypatch, 1, errno.EIO)
    with pytest.raises(OSError):
        journal.save_many({"g": HardState(5, "b", 0)})
    with pytest.raises(StorageFailed):
        journal.save_many({"g": HardState(6, "b", 0)})
    assert journal.load("g") == HardState(1, "a", 0)
    journal.close()


def test_the_file_cache_never_retries_a_failed_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handles = FileHandles(4)
    path = str(tmp_path / "file")
    with handles.pin(path, write=True) as fd:
        os.pwrite(fd, b"data", 0)
    _FailingFsync(monkeypatch, 1, errno.EIO)
    with pytest.raises(StorageFailed):
        handles.fsync(path)
    with pytest.raises(StorageFailed):
        handles.fsync(path)  # a retry would succeed now, and lie
    with pytest.raises(StorageFailed), handles.pin(path, write=True):
        pass
    handles.discard(path)  # the file is being deleted: its failure goes with it
    handles.fsync(path)
