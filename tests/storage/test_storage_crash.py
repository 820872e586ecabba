"""Power loss around a segment roll, and files whose names must be durable, on the simulated disk
and on real files."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import xxhash

from storage import (
    DamagedLog,
    FileHandles,
    HardState,
    LogConfig,
    SegmentedLog,
    StateJournal,
    StorageError,
)
from storage.segment import _INDEX_HEADER, _INDEX_MAGIC, Segment
from storage.simdisk import SimDisk

CONFIG = LogConfig(segment_bytes=4096, max_batch_bytes=2048)
ROLL_SEEDS = 300


def _payload(index: int) -> bytes:
    return bytes((index * 13 + k) % 251 for k in range(300 + index * 37 % 400))


def roll_and_crash(seed: int, log_class: type[SegmentedLog]) -> str | None:
    """Appends across segment rolls with group commits at random points, crashes, reopens.
    Returns what went wrong (None: every durable entry survived, and nothing else is served)."""
    rng = random.Random(seed)
    disk = SimDisk(rng)
    path = "/node/log"
    log = log_class(path, CONFIG, handles=FileHandles(8, disk))
    written: dict[int, bytes] = {}
    for _ in range(rng.randrange(8, 30)):
        index = log.append(_payload(len(written) + 1), 1, 1, 0, sync=False)
        written[index] = _payload(index)
        if rng.random() < 0.3:
            log.flush()
    durable = log.durable_index
    disk.crash()
    try:
        reopened = SegmentedLog(path, CONFIG, handles=FileHandles(8, disk))
    except StorageError as error:
        return f"seed {seed}: the log does not open after the crash: {error!r}"
    with reopened:
        if reopened.last_index < durable:
            return f"seed {seed}: durable entries lost: {reopened.last_index} < {durable}"
        for index in range(1, reopened.last_index + 1):
            try:
                data = bytes(reopened.read(index).data)
            except (StorageError, OSError) as error:
                return f"seed {seed}: entry {index} is listed but cannot be read: {error!r}"
            if data != written.get(index):
                return f"seed {seed}: entry {index} holds other data"
    return None


def test_power_loss_around_a_segment_roll_loses_nothing_durable() -> None:
    problems = [roll_and_crash(seed, SegmentedLog) for seed in range(ROLL_SEEDS)]
    assert [problem for problem in problems if problem] == []


class _SealsWithoutFsync(SegmentedLog):
    """The old roll: the index is written (not fsynced) and the new segment created while the
    old segment's tail is not yet durable."""

    def _seal(self, segment: Segment) -> None:
        disk = self._disk
        body = b"".join(
            column.tobytes()
            for column in (
                segment.positions,
                segment.terms,
                segment.base_offsets,
                segment.timestamps,
                segment.counts,
            )
        )
        header = _INDEX_HEADER.pack(
            _INDEX_MAGIC, len(segment.positions), xxhash.xxh3_64_intdigest(body), 0
        )
        fd = disk.open(segment.index_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        disk.write_all(fd, header + body)
        disk.close(fd)
        disk.replace(segment.index_path + ".tmp", segment.index_path)


def test_the_roll_check_catches_a_roll_that_does_not_fsync_first() -> None:
    problems = [roll_and_crash(seed, _SealsWithoutFsync) for seed in range(ROLL_SEEDS)]
    assert any(problems), "a roll without fsync went unnoticed"


def _fill(directory: Path, entries: int) -> None:
    with SegmentedLog(directory, CONFIG) as log:
        for n in range(entries):
            log.append(_payload(n + 1), 1, 1, 0)


def test_an_index_that_outlived_its_entries_is_not_trusted(tmp_path: Path) -> None:
    # as after the old roll: the sealed segment's tail lost, its index (listing it) kept
    _fill(tmp_path / "log", 40)
    sealed = sorted((tmp_path / "log").glob("*.log"))[0]
    raw = sealed.read_bytes()
    sealed.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(DamagedLog, match="sealed segment"):
        SegmentedLog(tmp_path / "log", CONFIG)


def _fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return calls


def test_a_new_state_journal_makes_its_name_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = _fsynced_paths(monkeypatch)
    journal = StateJournal(tmp_path / "journal")
    journal.save_many({"g": HardState(1, "a", 0)})
    # the journal, then its directory's entry in every ancestor (it may have just been made)
    ancestors = [str(tmp_path), *map(str, tmp_path.parents)]
    assert fsyncs[:2] == [str(tmp_path / "journal"), str(tmp_path)]
    assert fsyncs == [str(tmp_path / "journal"), *ancestors[: len(fsyncs) - 1]]
    assert len(fsyncs) >= 3  # /tmp/... has ancestors this process can open
    count = len(fsyncs)
    journal.save_many({"g": HardState(2, "a", 0)})
    assert fsyncs[count:] == [str(tmp_path / "journal")]  # once durable, one fsync per save
    journal.close()


def test_a_new_journal_survives_a_crash_on_the_simulated_disk() -> None:
    for seed in range(50):
        disk = SimDisk(random.Random(seed))
        disk.makedirs("/node")
        for directory in ("/", "/node"):
            fd = disk.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            disk.fsync(fd)
            disk.close(fd)
        journal = StateJournal("/node/journal", disk=disk)
        journal.save_many({"g": HardState(3, "b", 0)})
        disk.crash()
        assert StateJournal("/node/journal", disk=disk).load("g") == HardState(3, "b", 0)


def test_a_new_log_in_new_directories_survives_a_crash_once_flushed() -> None:
    for seed in range(50):
        disk = SimDisk(random.Random(seed))
        fd = disk.open("/", os.O_RDONLY | os.O_DIRECTORY)
        disk.fsync(fd)
        with SegmentedLog("/data/replica/log", CONFIG, handles=FileHandles(8, disk)) as log:
            log.append(b"x", 1, 1, 0)
        disk.crash()
        with SegmentedLog("/data/replica/log", CONFIG, handles=FileHandles(8, disk)) as log:
            assert log.last_index == 1, f"seed {seed}"


class _CountingDisk(SimDisk):
    """A simulated disk that counts fsyncs."""

    fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


def test_a_log_closed_cleanly_opens_as_durable_with_no_fsync_and_keeps_every_entry() -> None:
    """A clean stop closes each log (its close flushes): the next open may trust its files
    (`durable=True`, a node's clean-shutdown marker) and skip recovery's fsync, and a power
    loss after that open loses nothing that was written before the close."""
    for seed in range(20):
        rng = random.Random(seed)
        disk = _CountingDisk(rng)
        log = SegmentedLog("/node/log", CONFIG, handles=FileHandles(8, disk))
        count = rng.randrange(1, 30)
        for index in range(1, count + 1):
            log.append(_payload(index), 1, 1, 0, sync=False)  # written, not yet fsynced
        log.close()
        before = disk.fsyncs
        reopened = SegmentedLog("/node/log", CONFIG, handles=FileHandles(8, disk), durable=True)
        assert disk.fsyncs == before, f"seed {seed}: a durable open fsyncs"
        reopened.close()
        disk.crash()
        with SegmentedLog("/node/log", CONFIG, handles=FileHandles(8, disk)) as after:
            assert after.last_index == count, f"seed {seed}: {after.last_index} of {count}"
            assert [bytes(after.read(i).data) for i in range(1, count + 1)] == [
                _payload(i) for i in range(1, count + 1)
            ]
        # without the trust, opening fsyncs the active segment, as after a crash
        before = disk.fsyncs
        SegmentedLog("/node/log", CONFIG, handles=FileHandles(8, disk)).close()
        assert disk.fsyncs > before, f"seed {seed}: an untrusted open does not fsync"
