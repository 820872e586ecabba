"""Bad input gets a clear error naming the value and the valid range, and changes nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from storage import (
    BatchTooLarge,
    FsyncPolicy,
    IndexOutOfRange,
    InvalidArgument,
    LogConfig,
    NotALogDirectory,
    OffsetOutOfRange,
    SegmentedLog,
)

CONFIG = LogConfig(segment_bytes=4096, max_batch_bytes=1024)


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
    }


@pytest.fixture
def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    with SegmentedLog(tmp_path / "log", CONFIG) as opened:
        for n in range(20):
            opened.append(b"x" * 300, 2, 3, n)
        yield opened


def test_an_oversized_batch_is_refused_and_nothing_changes(log: SegmentedLog) -> None:
    before = _snapshot(Path(log.directory))
    with pytest.raises(BatchTooLarge, match="1025 bytes exceeds max_batch_bytes=1024"):
        log.append(b"y" * 1025, 2, 1, 0)
    assert _snapshot(Path(log.directory)) == before
    assert log.last_index == 20


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda log: log.read(0), "index 0 is out of range: valid indexes are 1..20"),
        (lambda log: log.read(21), "index 21 is out of range: valid indexes are 1..20"),
        (lambda log: log.term_at(21), "valid indexes are 1..20"),
        (lambda log: log.find_offset(60), "offset 60 is out of range: valid offsets are 0..59"),
        (lambda log: log.find_offset(-1), "valid offsets are 0..59"),
        (lambda log: log.read_from(22, 100), "index 22 is out of range"),
        (lambda log: log.truncate_from(22), "truncation point 22 is out of range"),
        (lambda log: log.truncate_prefix(0), "prefix truncation point 0 is out of range"),
        (lambda log: log.append(b"z", 1, 1, 0), "term 1 is below the log's last term 2"),
        (lambda log: log.append(b"z", 2, -1, 0), "record_count=-1"),
        (lambda log: log.reset(0, 0, 0), "index must be >= 1"),
    ],
)
def test_out_of_range_calls_name_the_valid_range(log: SegmentedLog, call, message: str) -> None:  # type: ignore[no-untyped-def]
    before = _snapshot(Path(log.directory))
    with pytest.raises((IndexOutOfRange, OffsetOutOfRange, InvalidArgument), match=message):
        call(log)
    assert _snapshot(Path(log.directory)) == before
    assert (log.first_index, log.last_index, log.next_offset) == (1, 20, 60)


def test_a_directory_that_is_not_a_log_is_refused_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8 not a log")
    before = _snapshot(foreign)
    with pytest.raises(NotALogDirectory, match=r"has no log\.meta and holds cat\.jpg"):
        SegmentedLog(foreign, CONFIG)
    assert _snapshot(foreign) == before


def test_a_file_is_not_a_log_directory(tmp_path: Path) -> None:
    plain = tmp_path / "file"
    plain.write_bytes(b"hello")
    with pytest.raises(NotALogDirectory, match="is not a directory"):
        SegmentedLog(plain, CONFIG)
    assert plain.read_bytes() == b"hello"


def test_a_garbled_meta_file_is_refused(tmp_path: Path) -> None:
    with SegmentedLog(tmp_path / "log", CONFIG):
        pass
    (tmp_path / "log" / "log.meta").write_bytes(b"{not json")
    with pytest.raises(NotALogDirectory, match="is not a Flotilla log header"):
        SegmentedLog(tmp_path / "log", CONFIG)


def test_a_missing_directory_is_refused_without_create(tmp_path: Path) -> None:
    with pytest.raises(NotALogDirectory, match="does not exist"):
        SegmentedLog(tmp_path / "nope", CONFIG, create=False)
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("always", True),
        ("never", True),
        ("interval:50", True),
        ("interval:0", False),
        ("sometimes", False),
        ("interval:x", False),
    ],
)
def test_fsync_policy_parsing(text: str, valid: bool) -> None:
    if valid:
        assert str(FsyncPolicy.parse(text)) == text
    else:
        with pytest.raises(InvalidArgument, match="use 'always', 'never' or 'interval:<ms>'"):
            FsyncPolicy.parse(text)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match="segment_bytes=10"):
        LogConfig(segment_bytes=10)
    with pytest.raises(InvalidArgument, match="retention_bytes=0"):
        LogConfig(retention_bytes=0)
