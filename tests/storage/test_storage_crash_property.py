"""The segmented log on the simulated disk, under random appends, flushes, truncations, segment
rolls, crashes, bit flips and write/fsync errors, against a model of what it acknowledged.

Checked after every crash (each seed is bounded in steps):
- every entry acknowledged as durable (a `flush`, or a truncation, that returned) survives;
- nothing is served that was not written at that index (corrupt bytes are never served);
- a flipped bit in durable data is reported (`DamagedLog` on open, `CorruptEntry` on read), never
  cut silently as a torn tail; one in an index is repaired (the index rebuilt from the `.log`);
  no damage is reported where no entry's bit was flipped;
- after a failed write or fsync the log refuses every write and never claims more durable than
  what succeeded (fail-stop: the process then "exits", i.e. crashes and reopens).

The same check run against deliberately broken logs (one that retries a failed fsync, one whose
recovery cuts corruption as a torn tail) must report a violation.

Each violation names its seed and step; replay one with
`python -c "from tests.storage.test_storage_crash_property import run; run(SEED)"`.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from storage import (
    CorruptEntry,
    DamagedLog,
    FileHandles,
    LogConfig,
    SegmentedLog,
    StorageError,
    StorageFailed,
)
from storage.segment import Segment
from storage.simdisk import SimDisk

CONFIG = LogConfig(segment_bytes=4096, max_batch_bytes=1024)
PATH = "/node/replica/log"
SEEDS = 150
STEPS = 70


@dataclass
class Model:
    first: int = 1
    entries: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> (term, data)
    durable: int = 0  # every entry up to here was acknowledged as durable
    last_term: int = 1

    @property
    def last(self) -> int:
        return max(self.entries, default=self.first - 1)


class Violation(AssertionError):
    pass


class _Ended(Exception):
    """The replica was found damaged: it would be rebuilt from its peers; the run ends."""


@dataclass
class Run:
    seed: int
    log_class: type[SegmentedLog]
    handles_class: type[FileHandles]
    rng: random.Random = field(init=False)
    disk: SimDisk = field(init=False)
    model: Model = field(default_factory=Model)
    flipped: bool = False  # a bit was flipped since the log was last found whole
    step: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.disk = SimDisk(self.rng)
        self.log = self._open()

    def _open(self) -> SegmentedLog:
        handles = self.handles_class(4, self.disk)
        return self.log_class(PATH, CONFIG, handles=handles)

    def fail(self, what: str) -> Violation:
        return Violation(f"seed {self.seed}, step {self.step}: {what}")

    # -- operations -----------------------------------------------------------------------------
    def append(self) -> None:
        model = self.model
        term = model.last_term + (self.rng.random() < 0.1)
        data = self.rng.randbytes(self.rng.randrange(1, 900))
        index = self.log.append(data, term, 1, 0, sync=self.rng.random() < 0.3)
        if index != model.last + 1:
            raise self.fail(f"append returned index {index}, expected {model.last + 1}")
        model.entries[index] = (term, data)
        model.last_term = term
        if self.log.durable_index >= index:  # `sync=True` under `always`: acknowledged
            model.durable = index

    def flush(self) -> None:
        self.log.flush()
        self.model.durable = self.model.last

    def truncate_from(self) -> None:
        model = self.model
        if model.last < model.first:
            return
        index = self.rng.randrange(max(model.first, model.last - 5), model.last + 1)
        model.durable = min(model.durable, index - 1)  # entries from `index` on may go
        self.log.truncate_from(index)
        for gone in range(index, model.last + 1):
            del model.entries[gone]
        model.durable = model.last  # `truncate_from` is durable on return

    def truncate_prefix(self) -> None:
        model = self.model
        if model.last - model.first < 4:
            return
        index = model.first + self.rng.randrange(1, 3)
        self.log.truncate_prefix(index)
        for gone in range(model.first, index):
            del model.entries[gone]
        model.first = index

    def inject_error(self) -> None:
        self.disk.fail(
            self.rng.choice(["write", "fsync"]), self.rng.choice([errno.EIO, errno.ENOSPC])
        )

    def flip(self) -> None:
        """Flips a bit of a durable entry that is not the log's last one (a flip there cannot
        be told from a torn write: see `storage.recovery`), then crashes: the damage is at
        rest when the log is next opened."""
        self._flip()
        if not self.crash_and_check():
            raise _Ended

    def _flip(self) -> None:
        self.log.flush()
        self.model.durable = self.model.last
        segments: list[Segment] = [s for s in self.log._segments if s.entry_count]
        sealed = [s.index_path for s in segments if self.disk.kind(s.index_path) == "file"]
        if sealed and self.rng.random() < 0.3:
            # an index is rebuilt from its `.log`: no damage may be reported for it
            self.disk.flip(self.rng.choice(sealed))
            return
        candidates = [
            (segment, row)
            for segment in segments
            for row in range(segment.entry_count)
            if self.model.first <= segment.base_index + row < self.model.last
        ]
        if not candidates:
            return
        segment, row = self.rng.choice(candidates)
        start, end = segment.positions[row], segment.end_of(row)
        self.disk.flip(segment.log_path, self.rng.randrange(start, end))
        self.flipped = True

    # -- crash and check ----------------------------------------------------------------------
    def crash_and_check(self) -> bool:
        """Power loss, reopen, check. False when the replica is found damaged (it would be
        rebuilt from its peers: the run ends)."""
        self.disk.crash()
        self.disk.faults.once.clear()  # a fault armed for the process that died
        try:
            self.log = self._open()
        except DamagedLog as error:
            if not self.flipped:
                raise self.fail(f"damage reported where no bit was flipped: {error}") from None
            return False
        except StorageError as error:
            raise self.fail(f"the log does not open after a crash: {error!r}") from None
        log, model = self.log, self.model
        if log.first_index != model.first:
            raise self.fail(f"first_index {log.first_index}, expected {model.first}")
        if log.last_index < model.durable:
            raise self.fail(
                f"durable entries lost: last_index {log.last_index} < durable {model.durable}"
                + (" (a flipped bit was cut as a torn tail)" if self.flipped else "")
            )
        detected = False
        survivors: dict[int, tuple[int, bytes]] = {}
        for index in range(log.first_index, log.last_index + 1):
            try:
                entry = log.read(index)
            except CorruptEntry as error:
                if not self.flipped:
                    raise self.fail(f"entry {index} listed but unreadable: {error}") from None
                detected = True
                continue
            got = (entry.term, bytes(entry.data))
            if got != model.entries.get(index):
                raise self.fail(f"entry {index} served with data never written there")
            survivors[index] = got
        if detected:
            return False  # found by a read: never served; the replica would be rebuilt
        model.entries = survivors
        model.durable = log.last_index
        model.last_term = log.last_term
        self.flipped = False
        return True

    def after_storage_failure(self, error: StorageFailed) -> None:
        """Fail-stop: the log must stay stopped and claim nothing more, then the node exits."""
        log = self.log
        if log.durable_index > self.model.durable:
            raise self.fail(
                f"durable_index {log.durable_index} > acknowledged {self.model.durable}"
            )
        for retry in (log.flush, lambda: log.append(b"x", self.model.last_term, 1, 0)):
            try:
                retry()
            except StorageFailed:
                continue
            raise self.fail(f"the log accepted a write after {error!r}")


OPERATIONS: list[tuple[float, str]] = [
    (0.45, "append"),
    (0.12, "flush"),
    (0.05, "truncate_from"),
    (0.04, "truncate_prefix"),
    (0.08, "crash"),
    (0.03, "flip"),
    (0.05, "inject_error"),
]


def run(
    seed: int,
    log_class: type[SegmentedLog] = SegmentedLog,
    handles_class: type[FileHandles] = FileHandles,
) -> None:
    """One seeded run; raises `Violation` naming the seed and step."""
    state = Run(seed, log_class, handles_class)
    names = [name for _, name in OPERATIONS]
    weights = [weight for weight, _ in OPERATIONS]
    for state.step in range(STEPS):
        name = state.rng.choices(names, weights)[0]
        try:
            if name == "crash":
                if not state.crash_and_check():
                    return
            else:
                operation: Callable[[], None] = getattr(state, name)
                operation()
        except StorageFailed as error:
            state.after_storage_failure(error)
            if not state.crash_and_check():
                return
        except _Ended:
            return
    state.crash_and_check()


def test_durable_entries_survive_crashes_flips_and_errors() -> None:
    for seed in range(SEEDS):
        run(seed)


class _RetryingHandles(FileHandles):
    """The old cache: a failed fsync is forgotten, so the next one 'succeeds'."""

    def fail(self, path: str, error: OSError) -> None:
        pass


class _RetryingLog(SegmentedLog):
    """The old log: goes on after a failed write or fsync."""

    def _check_writable(self) -> None:
        self._check_open()


class _CuttingLog(SegmentedLog):
    """The old recovery: any bad entry in the active segment is a torn tail, cut."""

    def _open(self, create: bool) -> None:
        original = Segment.find_entry_after
        Segment.find_entry_after = lambda *args: None  # type: ignore[method-assign]
        try:
            super()._open(create)
        finally:
            Segment.find_entry_after = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("log_class", "handles_class"),
    [(_RetryingLog, _RetryingHandles), (_CuttingLog, FileHandles)],
    ids=["retries-failed-fsync", "cuts-corruption"],
)
def test_the_property_check_catches_a_broken_log(
    log_class: type[SegmentedLog], handles_class: type[FileHandles]
) -> None:
    with pytest.raises(Violation):
        for seed in range(SEEDS):
            run(seed, log_class, handles_class)
