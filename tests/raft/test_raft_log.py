"""One conformance suite for every `RaftLogStorage`: `MemoryLog` and `SegmentedRaftLog`.

Plus the crash model of `MemoryLog`, which the simulator's durability claims rest on, and a
property test of both logs against a plain list model under random operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raft.codec import encode_config_entry
from raft.errors import LogError
from raft.log import MemoryLog, RaftLogStorage
from raft.storage_log import SegmentedRaftLog
from raft.types import (
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Entry,
    EntryKind,
    LogBoundary,
)
from storage import LogConfig, SegmentedLog

CONFIG_A = Configuration(frozenset({"a", "b", "c"}))
CONFIG_AD = Configuration(frozenset({"a", "b", "c"}), frozenset({"d"}))


def normal(index: int, term: int, data: bytes = b"batch", count: int = 2) -> Entry:
    return Entry(index, term, EntryKind.NORMAL, count, data, 1000 + index)


def config_entry(index: int, term: int, config: Configuration = CONFIG_AD) -> Entry:
    data = encode_config_entry(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d"), config)
    return Entry(index, term, EntryKind.CONFIG, 0, data, 0)


def noop(index: int, term: int) -> Entry:
    return Entry(index, term, EntryKind.NOOP, 0, b"", 0)


LogFactory = Callable[[], RaftLogStorage]


@pytest.fixture(params=["memory", "segmented"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogFactory]:
    opened: list[SegmentedLog] = []

    def factory() -> RaftLogStorage:
        if request.param == "memory":
            return MemoryLog()
        directory = tmp_path / f"log{len(opened)}"
        segmented = SegmentedLog(directory, LogConfig(segment_bytes=4096))
        opened.append(segmented)
        return SegmentedRaftLog(segmented)

    yield factory
    for segmented in opened:
        segmented.close()


def test_fresh_log_shape(make_log: LogFactory) -> None:
    log = make_log()
    assert (log.first_index, log.last_index) == (1, 0)
    assert log.term(0) == 0
    assert log.boundary() == LogBoundary(0, 0, 0, None)
    assert log.config_entries() == []
    with pytest.raises(LogError):
        log.term(1)


def test_append_read_and_kinds_round_trip(make_log: LogFactory) -> None:
    log = make_log()
    written = [noop(1, 1), normal(2, 1), config_entry(3, 2), normal(4, 2, b"x" * 100, 7)]
    log.append(written)
    log.sync()
    assert log.last_index == 4
    assert [log.term(i) for i in range(0, 5)] == [0, 1, 1, 2, 2]
    assert log.entries(1, 5, 1 << 30) == written
    assert log.config_entries() == [written[2]]
    with pytest.raises(LogError):
        log.append([normal(9, 2)])


def test_entries_respect_max_bytes_but_return_at_least_one(make_log: LogFactory) -> None:
    log = make_log()
    log.append([normal(i, 1, b"y" * 52) for i in range(1, 11)])  # 100 bytes each
    assert len(log.entries(1, 11, 1)) == 1
    assert len(log.entries(1, 11, 250)) == 2
    assert len(log.entries(3, 5, 1 << 20)) == 2
    with pytest.raises(LogError):
        log.entries(0, 3, 100)
    with pytest.raises(LogError):
        log.entries(5, 12, 100)


def test_truncate_from_drops_tail_and_config_entries(make_log: LogFactory) -> None:
    log = make_log()
    log.append([normal(1, 1), config_entry(2, 1), normal(3, 1)])
    log.truncate_from(2)
    assert log.last_index == 1
    assert log.config_entries() == []
    log.append([normal(2, 3)])
    assert log.term(2) == 3
    with pytest.raises(LogError):
        log.truncate_from(5)


def test_compact_keeps_offsets_terms_and_the_boundary_configuration(make_log: LogFactory) -> None:
    log = make_log()
    log.append([normal(1, 1, count=3), config_entry(2, 1), normal(3, 2, count=4), normal(4, 2)])
    log.compact(3)
    assert (log.first_index, log.last_index) == (3, 4)
    assert log.term(2) == 1
    assert log.boundary() == LogBoundary(2, 1, 3, CONFIG_AD)
    assert log.config_entries() == []
    assert log.entries(3, 5, 1 << 20)[0] == normal(3, 2, count=4)
    with pytest.raises(LogError):
        log.term(1)
    log.compact(3)  # no-op
    with pytest.raises(LogError):
        log.compact(9)


def test_reset_restarts_after_a_boundary(make_log: LogFactory) -> None:
    log = make_log()
    log.append([normal(1, 1), normal(2, 1)])
    boundary = LogBoundary(10, 4, 57, CONFIG_A)
    log.reset(boundary)
    assert (log.first_index, log.last_index) == (11, 10)
    assert log.boundary() == boundary
    log.append([normal(11, 5)])
    log.sync()
    assert log.term(11) == 5 and log.term(10) == 4


def test_memory_log_crash_keeps_only_what_was_synced() -> None:
    log = MemoryLog()
    log.append([normal(1, 1), normal(2, 1)])
    log.sync()
    log.append([normal(3, 1)])
    assert log.crashed().last_index == 2
    log.truncate_from(2)  # an unsynced truncation comes undone in a crash
    log.append([normal(2, 2)])
    after = log.crashed()
    assert after.last_index == 2 and after.term(2) == 1
    log.sync()
    assert log.crashed().term(2) == 2
    assert log.durable_term(2) == 2 and log.durable_term(3) is None
    log.compact(2)
    assert log.crashed().first_index == 1  # compaction not synced yet
    log.sync()
    assert log.crashed().first_index == 2


def test_memory_log_crash_may_keep_a_torn_prefix_of_unsynced_writes() -> None:
    import random

    log = MemoryLog()
    log.append([normal(1, 1)])
    log.sync()
    log.append([normal(2, 1), normal(3, 1), normal(4, 1)])
    log.truncate_from(3)
    log.append([normal(3, 2)])
    seen = set()
    rng = random.Random(5)
    for _ in range(200):
        after = log.crashed(rng)
        seen.add(tuple(after.term(i) for i in range(1, after.last_index + 1)))
    # never less than the synced state; any prefix of the writes since, torn appends included
    assert seen == {(1,), (1, 1), (1, 1, 1), (1, 1, 1, 1), (1, 1, 2)}


def test_memory_log_refuses_out_of_range() -> None:
    log = MemoryLog()
    with pytest.raises(LogError):
        log.truncate_from(3)
    with pytest.raises(LogError):
        log.compact(2)


# -- the property test --------------------------------------------------------------------------

_op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("truncate"), st.integers(0, 10), st.just(0), st.just(False)),
    st.tuples(st.just("compact"), st.integers(0, 10), st.just(0), st.just(False)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(_op, max_size=25))
def test_both_logs_agree_with_a_list_model(
    ops: list[tuple[str, int, int, bool]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    directory = tmp_path_factory.mktemp("model")
    segmented = SegmentedLog(directory, LogConfig(segment_bytes=4096))
    logs: list[RaftLogStorage] = [MemoryLog(), SegmentedRaftLog(segmented)]
    term = 1
    try:
        for op, amount, bump, with_config in ops:
            first, last = logs[0].first_index, logs[0].last_index
            if op == "append":
                term += bump
                batch = [normal(last + 1 + k, term, b"d%d" % (last + k)) for k in range(amount)]
                if with_config:
                    batch[0] = config_entry(last + 1, term)
                for log in logs:
                    log.append(batch)
            elif op == "truncate":
                point = min(last + 1, first + amount)
                for log in logs:
                    log.truncate_from(point)
            else:
                point = min(last + 1, first + amount)
                for log in logs:
                    log.compact(point)
            memory, disk = logs
            assert (disk.first_index, disk.last_index) == (memory.first_index, memory.last_index)
            assert disk.boundary() == memory.boundary()
            assert disk.config_entries() == memory.config_entries()
            if memory.last_index >= memory.first_index:
                span = (memory.first_index, memory.last_index + 1)
                assert disk.entries(*span, 1 << 30) == memory.entries(*span, 1 << 30)
    finally:
        segmented.close()
