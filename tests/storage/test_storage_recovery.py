"""Crash recovery: torn tails at every byte boundary, bit flips, damaged and missing indexes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from storage import (
    CorruptEntry,
    CorruptLog,
    DamagedLog,
    FileHandles,
    LogConfig,
    SegmentedLog,
    sync_logs,
)
from storage.entry import HEADER_SIZE
from storage.recovery import recover

CONFIG = LogConfig(segment_bytes=8192, max_batch_bytes=4096)


def _payload(index: int) -> bytes:
    return bytes((index * 7 + k) % 251 for k in range(200 + index % 37))


def _fill(directory: Path, entries: int) -> list[tuple[int, bytes]]:
    written = []
    with SegmentedLog(directory, CONFIG) as log:
        for n in range(entries):
            data = _payload(n)
            index = log.append(data, 1 + n // 10, 2, 1000 + n)
            written.append((index, data))
    return written


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def _check_prefix(log: SegmentedLog, written: list[tuple[int, bytes]], count: int) -> None:
    assert log.last_index == count
    for index, data in written[:count]:
        assert bytes(log.read(index).data) == data
    assert log.next_offset == 2 * count


def test_clean_reopen_reports_nothing(tmp_path: Path) -> None:
    written = _fill(tmp_path / "log", 100)
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        assert log.recovery.clean
        assert log.segment_count > 2
        _check_prefix(log, written, 100)


def test_torn_tail_at_every_byte_boundary_of_the_last_entry(tmp_path: Path) -> None:
    source = tmp_path / "source"
    written = _fill(source, 25)
    active = _segments(source)[-1]
    whole = active.read_bytes()
    last_size = HEADER_SIZE + len(written[-1][1])
    last_start = len(whole) - last_size
    for cut in range(last_start, len(whole)):
        copy = tmp_path / f"cut{cut}"
        copy.mkdir()
        for file in source.iterdir():
            (copy / file.name).write_bytes(file.read_bytes())
        (copy / active.name).write_bytes(whole[:cut])
        with SegmentedLog(copy, CONFIG) as log:
            _check_prefix(log, written, 24)
            if cut == last_start:
                assert log.recovery.torn_tail is None
            else:
                assert log.recovery.torn_tail is not None
                assert log.recovery.truncated_bytes == cut - last_start
            # the log accepts appends again where the torn entry stood
            assert log.append(b"again", log.last_term, 1, 0) == 25
        for file in copy.iterdir():
            file.unlink()
        copy.rmdir()


def _entry_starts(written: list[tuple[int, bytes]], first: int, last: int) -> list[int]:
    """Byte positions of entries `first..last` (1-based) within their segment."""
    starts, position = [], 0
    for _, data in written[first - 1 : last]:
        starts.append(position)
        position += HEADER_SIZE + len(data)
    return starts


def test_a_flipped_byte_amid_fsynced_entries_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    # the audit's case: 10 fsynced entries in one segment, a byte of the 4th flipped; the old
    # recovery cut entries 4..10 and reported a torn tail (last_index 3)
    written = _fill(tmp_path / "log", 10)
    (active,) = _segments(tmp_path / "log")
    raw = bytearray(active.read_bytes())
    fourth = _entry_starts(written, 1, 10)[3]
    raw[fourth + 4] ^= 0x01
    active.write_bytes(raw)
    with pytest.raises(DamagedLog) as caught:
        SegmentedLog(tmp_path / "log", CONFIG)
    error = caught.value
    assert (error.path, error.position, error.index) == (str(active), fourth, 4)
    assert "not a torn tail" in str(error)
    assert active.read_bytes() == raw  # nothing was cut


@pytest.mark.parametrize("seed", range(8))
def test_a_bit_flip_before_the_last_entry_of_the_active_segment_is_reported_as_damage(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    written = _fill(tmp_path / "log", 25)
    active = _segments(tmp_path / "log")[-1]
    raw = bytearray(active.read_bytes())
    last_start = len(raw) - HEADER_SIZE - len(written[-1][1])
    position = rng.randrange(last_start)  # any byte of any entry but the last
    raw[position] ^= 1 << rng.randrange(8)
    active.write_bytes(raw)
    with pytest.raises(DamagedLog) as caught:
        SegmentedLog(tmp_path / "log", CONFIG)
    assert caught.value.path == str(active) and caught.value.position <= position
    # the end of the damaged log, past the damage: what the replica may have acknowledged
    assert (caught.value.last_index, caught.value.last_term) == (25, 3)
    assert active.read_bytes() == raw


def test_a_bit_flip_in_the_last_entry_reads_as_a_torn_tail(tmp_path: Path) -> None:
    # nothing valid follows it, so it cannot be told from a torn write: the documented limit
    written = _fill(tmp_path / "log", 25)
    active = _segments(tmp_path / "log")[-1]
    raw = bytearray(active.read_bytes())
    raw[len(raw) - 3] ^= 0x10
    active.write_bytes(raw)
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        assert log.recovery.torn_tail is not None
        _check_prefix(log, written, 24)


def test_many_damaged_entries_followed_by_valid_ones_are_still_damage(tmp_path: Path) -> None:
    # a wiped sector run: the bad entry's length is garbage, so the search for the entries after
    # it must find them by their index
    written = _fill(tmp_path / "log", 12)
    (active,) = _segments(tmp_path / "log")
    raw = bytearray(active.read_bytes())
    starts = _entry_starts(written, 1, 12)
    raw[starts[2] : starts[9]] = bytes(starts[9] - starts[2])  # entries 3..9 zeroed
    active.write_bytes(raw)
    with pytest.raises(DamagedLog, match=r"entry 10 at byte") as caught:
        SegmentedLog(tmp_path / "log", CONFIG)
    assert (caught.value.last_index, caught.value.last_term) == (12, 2)


def test_the_end_of_a_log_damaged_twice_is_found_past_both(tmp_path: Path) -> None:
    written = _fill(tmp_path / "log", 12)
    (active,) = _segments(tmp_path / "log")
    raw = bytearray(active.read_bytes())
    starts = _entry_starts(written, 1, 12)
    raw[starts[2] + 30] ^= 0x08  # entry 3
    raw[starts[7] : starts[9]] = bytes(starts[9] - starts[7])  # entries 8 and 9 zeroed
    active.write_bytes(raw)
    with pytest.raises(DamagedLog) as caught:
        SegmentedLog(tmp_path / "log", CONFIG)
    assert (caught.value.index, caught.value.last_index, caught.value.last_term) == (3, 12, 2)


@pytest.mark.parametrize("seed", range(4))
def test_bit_flip_in_a_sealed_segment_is_never_served(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    _fill(tmp_path / "log", 100)
    sealed = _segments(tmp_path / "log")[0]
    raw = bytearray(sealed.read_bytes())
    position = rng.randrange(len(raw))
    raw[position] ^= 1 << rng.randrange(8)
    sealed.write_bytes(raw)
    with SegmentedLog(tmp_path / "log", CONFIG) as log, pytest.raises(CorruptEntry):
        list(log.read_from(1, 10**9))
    with pytest.raises(CorruptEntry):
        SegmentedLog(tmp_path / "log", LogConfig(segment_bytes=8192, verify_on_open=True))
    sealed.with_suffix(".index").unlink()
    with pytest.raises(DamagedLog, match="sealed segment") as caught:
        SegmentedLog(tmp_path / "log", CONFIG)
    assert (caught.value.last_index, caught.value.last_term) == (100, 10)


@pytest.mark.parametrize("damage", ["delete", "truncate", "garble"])
def test_a_missing_or_damaged_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    written = _fill(tmp_path / "log", 100)
    index_file = _segments(tmp_path / "log")[1].with_suffix(".index")
    before = index_file.read_bytes()
    if damage == "delete":
        index_file.unlink()
    elif damage == "truncate":
        index_file.write_bytes(before[: len(before) // 2])
    else:
        index_file.write_bytes(before[:40] + bytes([before[40] ^ 0xFF]) + before[41:])
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        assert log.recovery.rebuilt_indexes == (index_file.name,)
        _check_prefix(log, written, 100)
        assert log.find_offset(77) == 39
    assert index_file.read_bytes() == before


def test_an_interrupted_prefix_truncation_finishes_on_open(tmp_path: Path) -> None:
    written = _fill(tmp_path / "log", 100)
    doomed = _segments(tmp_path / "log")[0]
    keep = doomed.read_bytes()
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        log.truncate_prefix(40)
    doomed.write_bytes(keep)  # as if the crash came between the meta write and the unlink
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        assert doomed.name in log.recovery.removed_segments
        assert log.first_index == 40
        assert bytes(log.read(40).data) == written[39][1]
    assert not doomed.exists()


def test_a_gap_before_the_first_segment_is_refused(tmp_path: Path) -> None:
    _fill(tmp_path / "log", 100)
    _segments(tmp_path / "log")[0].unlink()
    with pytest.raises(CorruptLog, match="missing"):
        SegmentedLog(tmp_path / "log", CONFIG)


def test_unsynced_appends_become_durable_on_flush(tmp_path: Path) -> None:
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        log.append(b"a", 1, 1, 0, sync=False)
        log.append(b"b", 1, 1, 0, sync=False)
        assert log.durable_index == 0
        log.flush()
        assert log.durable_index == 2
        log.truncate_from(2)
        assert log.durable_index == 1
    os.sync()


def test_truncating_back_to_a_compacted_start_leaves_an_empty_log(tmp_path: Path) -> None:
    # found by the model test: a segment left holding only entries below first_index
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        log.append(b"a", 1, 1, 0)
        log.append(b"b", 1, 0, 0)
        log.truncate_prefix(2)
        log.truncate_from(2)
        assert (log.first_index, log.last_index, log.last_term) == (2, 1, 1)
        assert (log.first_offset, log.next_offset) == (1, 1)
        assert log.append(b"c", 2, 1, 0) == 2
    with SegmentedLog(tmp_path / "log", CONFIG) as log:
        assert bytes(log.read(2).data) == b"c"
        assert log.find_offset(1) == 2


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_creating_a_log_costs_no_fsync_until_its_first_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = _count_fsyncs(monkeypatch)
    directory = tmp_path / "replica" / "log"
    log = SegmentedLog(directory, CONFIG)
    assert fsyncs == [] and (directory / "log.meta").exists()
    log.flush()  # nothing written yet: an empty log needs nothing durable
    assert fsyncs == []
    log.append(b"first", 1, 1, 0, sync=False)
    log.flush()
    # the segment, then the parents of both directories made for the log (each one's entry),
    # then the log's directory (segment and header)
    assert fsyncs == [
        str(directory / "00000000000000000001.log"),
        str(tmp_path),
        str(tmp_path / "replica"),
        str(directory),
    ]
    log.append(b"second", 1, 1, 0, sync=False)
    log.flush()
    assert len(fsyncs) == 5  # from now on, one fsync per dirty file
    log.close()


@pytest.mark.parametrize("leftover", ["empty header", "torn header", "no header"])
def test_a_creation_cut_short_by_a_crash_reopens_as_a_new_log(
    tmp_path: Path, leftover: str
) -> None:
    directory = tmp_path / "log"
    SegmentedLog(directory, CONFIG).close()
    header = (directory / "log.meta").read_bytes()
    if leftover == "empty header":
        (directory / "log.meta").write_bytes(b"")  # its data never reached the disk
    elif leftover == "torn header":  # part of it did; the rest reads as zeros
        (directory / "log.meta").write_bytes(header[:9] + bytes(len(header) - 9))
    else:
        (directory / "log.meta").unlink()
    with SegmentedLog(directory, CONFIG) as log:
        assert (log.first_index, log.last_index, log.next_offset) == (1, 0, 0)
        assert log.append(b"x", 1, 1, 0) == 1
    with SegmentedLog(directory, CONFIG, create=False) as log:
        assert log.last_index == 1 and log.recovery.clean


def test_sync_logs_makes_many_logs_durable_in_parallel(tmp_path: Path) -> None:
    logs = [SegmentedLog(tmp_path / f"log{n}", CONFIG) for n in range(40)]
    for n, log in enumerate(logs):
        log.append(_payload(n), 1, 2, 0, sync=False)
    assert sync_logs(logs[:1]) == 1  # a single log syncs on the calling thread
    assert sync_logs(logs) == 39  # the others, on the sync threads
    assert not any(log.needs_sync for log in logs)
    assert sync_logs(logs) == 0
    for log in logs:
        log.close()


def test_recover_returns_what_it_settled_on_for_the_log_to_install(tmp_path: Path) -> None:
    """`recover` is a function of the directory: it returns the segments, start and report (and
    whether it made the log), and the log applies them; it needs no log object to write into."""
    written = _fill(tmp_path / "log", 25)
    active = _segments(tmp_path / "log")[-1]
    active.write_bytes(active.read_bytes()[:-3])  # tear the last entry
    handles = FileHandles(8)
    recovered = recover(str(tmp_path / "log"), CONFIG, handles, create=False)
    assert recovered.start == (1, 0, 0)
    assert recovered.created_directories is None
    assert recovered.report.torn_tail is not None
    assert recovered.report.truncated_bytes == HEADER_SIZE + len(written[-1][1]) - 3
    assert recovered.segments[-1].last_index == 24
    for segment in recovered.segments:
        handles.close(segment.log_path)
        handles.close(segment.index_path)
    assert handles.open_count == 0
    fresh = recover(str(tmp_path / "new" / "log"), CONFIG, handles, create=True)
    assert fresh.segments == ()
    assert fresh.created_directories == (str(tmp_path / "new"), str(tmp_path / "new" / "log"))
