"""`SegmentedRaftLog` on a real `storage.SegmentedLog` in a temporary directory: what survives a
close and reopen, how the configuration sidecar recovers from a crash between its write and the
log's, and a `RaftNode` restarted from disk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from raft.codec import encode_config_entry
from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import LogError
from raft.storage_log import SIDECAR_NAME, SegmentedRaftLog
from raft.types import (
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Entry,
    EntryKind,
    LogBoundary,
    Role,
)
from storage import HardState, LogConfig, SegmentedLog, StateJournal

CONFIG = LogConfig(segment_bytes=4096)
CONFIG_AD = Configuration(frozenset({"a", "b", "c"}), frozenset({"d"}))


def normal(index: int, term: int, count: int = 2) -> Entry:
    return Entry(index, term, EntryKind.NORMAL, count, b"batch", 1000 + index)


def config_entry(index: int, term: int) -> Entry:
    data = encode_config_entry(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d"), CONFIG_AD)
    return Entry(index, term, EntryKind.CONFIG, 0, data, 0)


def noop(index: int, term: int) -> Entry:
    return Entry(index, term, EntryKind.NOOP, 0, b"", 0)


def open_log(directory: Path) -> tuple[SegmentedLog, SegmentedRaftLog]:
    segmented = SegmentedLog(directory, CONFIG)
    return segmented, SegmentedRaftLog(segmented)


def test_entries_configs_and_boundary_survive_reopen(tmp_path: Path) -> None:
    segmented, log = open_log(tmp_path)
    log.append([noop(1, 1), normal(2, 1, count=5), config_entry(3, 2), normal(4, 2)])
    log.sync()
    log.compact(2)
    segmented.close()
    segmented, log = open_log(tmp_path)
    try:
        assert (log.first_index, log.last_index) == (2, 4)
        assert log.boundary() == LogBoundary(1, 1, 0, None)
        assert [e.index for e in log.config_entries()] == [3]
        assert log.entries(2, 5, 1 << 20)[1] == config_entry(3, 2)
        log.compact(4)
        assert log.boundary() == LogBoundary(3, 2, 5, CONFIG_AD)
    finally:
        segmented.close()
    segmented, log = open_log(tmp_path)
    try:
        assert log.boundary() == LogBoundary(3, 2, 5, CONFIG_AD)
        assert log.config_entries() == []
    finally:
        segmented.close()


def test_a_listing_outliving_its_entry_is_dropped_on_open(tmp_path: Path) -> None:
    """The sidecar is written before a CONFIG entry is appended: a crash in between leaves a
    listing without its entry, which must not be taken for a configuration in force."""
    segmented, log = open_log(tmp_path)
    log.append([normal(1, 1), config_entry(2, 1)])
    sidecar = (tmp_path / SIDECAR_NAME).read_bytes()
    log.truncate_from(2)
    log.append([normal(2, 2)])  # same index, another term
    log.sync()
    (tmp_path / SIDECAR_NAME).write_bytes(sidecar)  # as if the rewrite never happened
    segmented.close()
    segmented, log = open_log(tmp_path)
    try:
        assert log.config_entries() == []
        assert log.term(2) == 2
    finally:
        segmented.close()


def test_compaction_crash_before_the_sidecar_rewrite_still_knows_the_boundary(
    tmp_path: Path,
) -> None:
    segmented, log = open_log(tmp_path)
    log.append([normal(1, 1), config_entry(2, 1), normal(3, 1)])
    log.sync()
    segmented.truncate_prefix(3)  # the log moved on; the sidecar did not
    segmented.close()
    segmented, log = open_log(tmp_path)
    try:
        assert log.boundary() == LogBoundary(2, 1, 2, CONFIG_AD)
        assert log.config_entries() == []
    finally:
        segmented.close()


def test_a_corrupt_sidecar_is_an_error(tmp_path: Path) -> None:
    segmented, _ = open_log(tmp_path)
    (tmp_path / SIDECAR_NAME).write_bytes(b"\x93garbage")
    try:
        with pytest.raises(LogError, match="not a Raft configuration sidecar"):
            SegmentedRaftLog(segmented)
    finally:
        segmented.close()


def test_single_node_group_commits_and_restarts_from_disk(tmp_path: Path) -> None:
    """The host loop over real storage: elect, propose, persist, restart, and find it all."""
    bootstrap = Configuration(frozenset({"a"}))
    journals: list[StateJournal] = []  # the one in use last; each start reopens it from disk

    def start() -> tuple[SegmentedLog, SegmentedRaftLog, RaftNode]:
        journals.append(StateJournal(tmp_path / "journal"))
        segmented, log = open_log(tmp_path / "log")
        state = journals[-1].load("a")
        node = RaftNode("a", bootstrap, log, state, RaftConfig(), random.Random(7))
        return segmented, log, node

    def drain(node: RaftNode, log: SegmentedRaftLog) -> None:
        while node.has_ready():
            ready = node.ready()
            if ready.boundary is not None:
                log.reset(ready.boundary)
            if ready.truncate_from is not None:
                log.truncate_from(ready.truncate_from)
            log.append(ready.entries)
            log.sync()
            if ready.hard_state is not None:
                journals[-1].save_many({"a": ready.hard_state})
            assert not ready.messages
            node.advance(ready)

    segmented, log, node = start()
    for _ in range(3 * RaftConfig().election_ticks):
        node.tick()
        drain(node, log)
    assert node.role is Role.LEADER
    indexes = [node.propose(b"record batch %d" % i, 3) for i in range(5)]
    drain(node, log)
    assert node.commit == indexes[-1] == 6
    segmented.close()
    journals[-1].close()

    segmented, log, node = start()
    try:
        assert node.commit == 6 and node.term == 1
        assert journals[-1].load("a") == HardState(1, "a", 6)
        assert log.entries(2, 7, 1 << 20)[0].data == b"record batch 0"
        assert segmented.next_offset == 15
    finally:
        segmented.close()
        journals[-1].close()
