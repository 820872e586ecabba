"""The segmented log against an in-memory model, under random operations (hypothesis).

Every read, property and offset lookup must match the model across appends, both kinds of
truncation, resets, segment rolls, and close/reopen. The same machine run against a deliberately
broken log must fail, so the model check is shown able to catch a bug.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from storage import (
    FileHandles,
    IndexOutOfRange,
    LogConfig,
    OffsetOutOfRange,
    SegmentedLog,
    StorageError,
)
from storage.simdisk import SimDisk

CONFIG = LogConfig(segment_bytes=4096, max_batch_bytes=2048)


@dataclass
class Model:
    first_index: int = 1
    start_term: int = 0
    start_offset: int = 0
    entries: list[tuple[int, bytes, int, int]] = field(default_factory=list)  # term, data, n, ts

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.entries) - 1

    @property
    def last_term(self) -> int:
        return self.entries[-1][0] if self.entries else self.start_term

    def base_offset(self, index: int) -> int:
        offset = self.start_offset
        for term_data in self.entries[: index - self.first_index]:
            offset += term_data[2]
        return offset

    @property
    def next_offset(self) -> int:
        return self.base_offset(self.last_index + 1)

    def entry(self, index: int) -> tuple[int, bytes, int, int]:
        return self.entries[index - self.first_index]


class LogMachine(RuleBasedStateMachine):
    log_class: type[SegmentedLog] = SegmentedLog

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="flotilla-model-")
        self.model = Model()
        self.log = self._open_log(self.directory + "/log", CONFIG)

    def _open_log(self, path: str, config: LogConfig) -> SegmentedLog:
        return self.log_class(path, config)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        assert self.log.first_index == 1 and self.log.last_index == 0

    @rule(
        data=st.binary(max_size=700),
        bump=st.integers(0, 2),
        count=st.integers(0, 5),
        timestamp=st.integers(0, 2**40),
        sync=st.booleans(),
    )
    def append(self, data: bytes, bump: int, count: int, timestamp: int, sync: bool) -> None:
        term = self.model.last_term + bump
        index = self.log.append(data, term, count, timestamp, sync=sync)
        self.model.entries.append((term, data, count, timestamp))
        assert index == self.model.last_index

    @rule(choice=st.integers(0, 10**6))
    def truncate_from(self, choice: int) -> None:
        model = self.model
        index = model.first_index + choice % (len(model.entries) + 1)
        self.log.truncate_from(index)
        del model.entries[index - model.first_index :]

    @rule(choice=st.integers(0, 10**6))
    def truncate_prefix(self, choice: int) -> None:
        model = self.model
        index = model.first_index + choice % (len(model.entries) + 1)
        term = model.start_term if index == model.first_index else model.entry(index - 1)[0]
        offset = model.base_offset(index)
        self.log.truncate_prefix(index)
        model.entries = model.entries[index - model.first_index :]
        model.first_index, model.start_term, model.start_offset = index, term, offset

    @rule(gap=st.integers(0, 20), term_bump=st.integers(0, 3), offset_gap=st.integers(0, 50))
    def reset(self, gap: int, term_bump: int, offset_gap: int) -> None:
        model = self.model
        index = model.last_index + 1 + gap
        term = model.last_term + term_bump
        offset = model.next_offset + offset_gap
        self.log.reset(index, term, offset)
        model.entries = []
        model.first_index, model.start_term, model.start_offset = index, term, offset

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = self._open_log(self.directory + "/log", CONFIG)
        assert self.log.recovery.torn_tail is None

    @rule(choice=st.integers(0, 10**6), max_bytes=st.integers(0, 5000))
    @precondition(lambda self: self.model.entries)
    def read_from(self, choice: int, max_bytes: int) -> None:
        model = self.model
        index = model.first_index + choice % len(model.entries)
        got = list(self.log.read_from(index, max_bytes))
        assert got, "read_from must yield at least one entry"
        for position, entry in enumerate(got):
            term, data, count, timestamp = model.entry(index + position)
            assert entry.index == index + position
            assert (entry.term, bytes(entry.data), entry.record_count) == (term, data, count)
            assert entry.timestamp_ms == timestamp
            assert entry.base_offset == model.base_offset(entry.index)
        stored = sum(48 + len(entry.data) for entry in got)
        assert len(got) == 1 or stored <= max_bytes

    @rule(choice=st.integers(0, 10**6))
    @precondition(
        lambda self: self.model.next_offset > self.model.base_offset(self.model.first_index)
    )
    def find_offset(self, choice: int) -> None:
        model = self.model
        first = model.base_offset(model.first_index)
        offset = first + choice % (model.next_offset - first)
        index = self.log.find_offset(offset)
        _, _, count, _ = model.entry(index)
        assert model.base_offset(index) <= offset < model.base_offset(index) + count

    @invariant()
    def properties_match(self) -> None:
        model, log = self.model, self.log
        assert log.first_index == model.first_index
        assert log.last_index == model.last_index
        assert log.last_term == model.last_term
        assert log.next_offset == model.next_offset
        assert log.first_offset == model.base_offset(model.first_index)
        assert log.term_at(model.first_index - 1) == model.start_term
        if model.entries:
            assert log.term_at(model.last_index) == model.last_term
            middle = model.first_index + len(model.entries) // 2
            entry = log.read(middle)
            assert bytes(entry.data) == model.entry(middle)[1]
        for bad in (model.first_index - 1, model.last_index + 1):
            with pytest.raises(IndexOutOfRange):
                log.read(bad)
        with pytest.raises(OffsetOutOfRange):
            log.find_offset(model.next_offset)


SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_log_matches_model() -> None:
    run_state_machine_as_test(LogMachine, settings=SETTINGS)


class SimLogMachine(LogMachine):
    """The log's model test, run over the simulated disk: one conformance suite, two disks."""

    def __init__(self) -> None:
        self.disk = SimDisk(random.Random(0))
        super().__init__()

    def _open_log(self, path: str, config: LogConfig) -> SegmentedLog:
        return SegmentedLog(path, config, handles=FileHandles(8, self.disk))


def test_log_matches_model_on_the_simulated_disk() -> None:
    run_state_machine_as_test(SimLogMachine, settings=settings(SETTINGS, max_examples=60))


class _BrokenLog(SegmentedLog):
    """A broken lookup: answers the entry before the one holding the offset."""

    def find_offset(self, offset: int) -> int:
        return max(super().find_offset(offset) - 1, self.first_index)


class _ForgetfulLog(SegmentedLog):
    """A broken prefix truncation that does not persist the new start."""

    def _write_meta(self, index: int, term: int, offset: int, *, publish: bool = True) -> None:
        self._start_index, self._start_term, self._start_offset = index, term, offset


@pytest.mark.parametrize("broken", [_BrokenLog, _ForgetfulLog])
def test_model_check_catches_a_broken_log(broken: type[SegmentedLog]) -> None:
    machine = type(f"Broken{broken.__name__}", (LogMachine,), {"log_class": broken})
    # The model check or the log's own recovery checks must notice; either counts as caught.
    with pytest.raises((AssertionError, StorageError)):
        run_state_machine_as_test(
            machine, settings=settings(SETTINGS, max_examples=200, report_multiple_bugs=False)
        )
