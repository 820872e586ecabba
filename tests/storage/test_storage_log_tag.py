"""A log's tag (`storage.meta`): the owner's name for what the log belongs to, carried by its
header from creation on, kept through a moved start, durable with the first flush, and a log
tagged otherwise refused before anything is touched."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from storage import FileHandles, ForeignLog, LogConfig, NotALogDirectory, SegmentedLog
from storage.meta import FRESH_START, Header, _encode, read_header
from storage.simdisk import SimDisk

CONFIG = LogConfig(segment_bytes=4096, max_batch_bytes=2048)
UID = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_a_new_log_carries_its_tag_and_another_tag_is_refused_untouched(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with SegmentedLog(directory, CONFIG, tag=UID) as log:
        assert log.tag == UID
        log.append(b"record", 1, 1, 0)
    (directory / "leftover.tmp").write_bytes(b"half")  # recovery would delete it
    before = _files(directory)
    with pytest.raises(ForeignLog, match=f"tagged '{UID}', not '{OTHER}'") as refused:
        SegmentedLog(directory, CONFIG, tag=OTHER)
    assert (refused.value.found, refused.value.expected) == (UID, OTHER)
    assert _files(directory) == before
    with SegmentedLog(directory, CONFIG, tag=UID) as log:
        assert (log.last_index, log.tag) == (1, UID)
    with SegmentedLog(directory, CONFIG) as log:  # no tag expected: the header's is reported
        assert (log.last_index, log.tag) == (1, UID)


def test_an_untagged_log_opens_with_any_tag_and_keeps_it_from_then_on(tmp_path: Path) -> None:
    """A log written before tags (its header has none) takes the one it is opened with, and
    the next header it writes carries it."""
    directory = tmp_path / "log"
    with SegmentedLog(directory, CONFIG) as log:
        for _ in range(3):
            log.append(b"record", 1, 1, 0)
    assert read_header(str(directory)) == Header(FRESH_START, None)
    with SegmentedLog(directory, CONFIG, tag=UID) as log:
        assert log.tag == UID
        log.truncate_prefix(2)
    assert read_header(str(directory)) == Header((2, 1, 1), UID)


def test_the_tag_outlives_a_moved_start(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with SegmentedLog(directory, CONFIG, tag=UID) as log:
        for _ in range(3):
            log.append(b"record", 1, 1, 0)
        log.truncate_prefix(3)
    with pytest.raises(ForeignLog):
        SegmentedLog(directory, CONFIG, tag=OTHER)
    with SegmentedLog(directory, CONFIG, tag=UID) as log:
        assert (log.first_index, log.last_index, log.tag) == (3, 3, UID)
        log.reset(10, 2, 7)
    assert read_header(str(directory)) == Header((10, 2, 7), UID)


def test_a_new_header_torn_anywhere_reads_as_a_new_untagged_log(tmp_path: Path) -> None:
    """A crash before a new log's first flush may leave its header cut short or zero-filled:
    that log holds nothing durable, and reads as new (its tag lost with it)."""
    fresh = _encode(*FRESH_START, UID)
    path = tmp_path / "log.meta"
    for cut in range(len(fresh)):
        for torn in (fresh[:cut], fresh[:cut] + b"\0" * (len(fresh) - cut)):
            path.write_bytes(torn)
            assert read_header(str(tmp_path)) == Header(FRESH_START, None), torn
    path.write_bytes(fresh)
    assert read_header(str(tmp_path)) == Header(FRESH_START, UID)
    # anything else that does not parse is refused
    for garbled in (b'{"format": "flotilla-log/2"', fresh.replace(b"start_term", b"start_tern")):
        path.write_bytes(garbled)
        with pytest.raises(NotALogDirectory, match="is not a Flotilla log header"):
            read_header(str(tmp_path))
    path.write_bytes(_encode(1, 0, 0)[:-1] + b', "tag": 7}')
    with pytest.raises(NotALogDirectory, match="tag 7 is not a string"):
        read_header(str(tmp_path))


def test_a_flushed_tagged_log_keeps_its_tag_through_power_loss() -> None:
    """Once any entry is durable, so is the tag: after a crash at any point the log still
    refuses another tag (a header lost or torn would let a foreign owner take the entries)."""
    for seed in range(60):
        disk = SimDisk(random.Random(seed))
        fd = disk.open("/", os.O_RDONLY | os.O_DIRECTORY)
        disk.fsync(fd)
        log = SegmentedLog("/data/replica/log", CONFIG, handles=FileHandles(8, disk), tag=UID)
        log.append(b"x", 1, 1, 0)
        log.flush()
        log.append(b"y", 1, 1, 0, sync=False)
        disk.crash()  # the log is left as the power loss left it
        with pytest.raises(ForeignLog):
            SegmentedLog("/data/replica/log", CONFIG, handles=FileHandles(8, disk), tag=OTHER)
        with SegmentedLog("/data/replica/log", CONFIG, handles=FileHandles(8, disk)) as log:
            assert (log.last_index >= 1, log.tag) == (True, UID), f"seed {seed}"
