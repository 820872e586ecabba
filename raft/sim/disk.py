"""A simulated host's storage on a simulated disk (`python -m raft.sim --disk sim`).

Each host keeps its Raft log in the real `SegmentedLog` (through `SegmentedRaftLog`, with its
`raft.configs` sidecar) and its hard state in the real `StateJournal`, both on its own
`storage.simdisk.SimDisk`, seeded from the run's seed. Segments are small, so they roll. A crash
is `SimDisk.crash()` — every write not fsynced is lost, or kept, or torn at any byte — followed by
reopening through the real recovery; a log or journal that recovery refuses is a violation
(`storage-recovery`), because a crash alone must never leave a disk the storage cannot reopen.

What the simulator counts as durable comes from the log: `SegmentedLog.durable_index` after the
fsync step, not from the simulator's own bookkeeping; so a storage that claims durability it does
not have loses acknowledged entries on a crash, and the checker sees committed entries vanish.

Disk errors: during chaos phases each write and fsync fails (EIO or ENOSPC) with a small
probability (`DiskStore.set_errors`). The real storage then refuses every later write
(`StorageFailed`), and the host fail-stops: it crashes and restarts later through recovery, as a
node exits and is restarted by its supervisor. Recovery itself runs without injected errors.

TEST ONLY mutations the sweep must catch: `sim-lying-fsync`, a log whose `flush` advances
`durable_index` without fsyncing; `sim-retries-fsync`, a log that retries a failed fsync (which
then succeeds, having nothing left pending: the kernel dropped the failed writes — fsyncgate) and
goes on as if it had never failed. Only fsyncs fail in that mode.
"""

from __future__ import annotations

import random

from raft.errors import LogError
from raft.sim.checker import Violation
from raft.storage_log import SegmentedRaftLog
from raft.types import HardState, LogBoundary
from storage import LogConfig, SegmentedLog, StorageError
from storage.entry import HEADER, HEADER_SIZE
from storage.handles import FileHandles
from storage.simdisk import SimDisk
from storage.state_journal import StateJournal

__all__ = ["DISK_MODES", "DiskDamaged", "DiskLog", "DiskStore"]

DISK_MODES = ("memory", "sim", "sim-lying-fsync", "sim-retries-fsync")
# the smallest segments allowed (a roll every ~70 entries); every checksum verified on open,
# so a bit flipped at rest in a sealed segment is found before the host serves anything
_CONFIG = LogConfig(segment_bytes=4096, verify_on_open=True)
_LOG_DIR = "/raft/log"
_JOURNAL = "/raft/state.journal"
_GROUP = "g"


class DiskDamaged(Exception):
    """A bit flipped at rest was found on reopen: the host must stay down (fail-stop)."""


class DiskLog(SegmentedRaftLog):
    """`SegmentedRaftLog` plus what the checker asks of a log's durable part."""

    @property
    def durable_last_index(self) -> int:
        log = self.segmented_log
        return max(log.first_index - 1, min(log.durable_index, log.last_index))

    @property
    def durable_boundary(self) -> LogBoundary:
        # compaction and reset are durable on return
        return self.boundary()

    def durable_term(self, index: int) -> int | None:
        if self.first_index - 1 <= index <= self.durable_last_index:
            return self.term(index)
        return None


class _LyingLog(SegmentedLog):
    """TEST ONLY: claims every append durable on `flush` without fsyncing it."""

    def flush(self) -> None:
        with self._lock:
            self._durable_index = self._last_index


class _RetryingLog(SegmentedLog):
    """TEST ONLY: retries a failed fsync instead of stopping (the fsyncgate bug)."""

    def flush(self) -> None:
        for _ in range(3):
            try:
                super().flush()
                return
            except StorageError:
                self._failed = None  # both layers of the fail-stop forgotten
                self._handles._failed.clear()
        super().flush()


class DiskStore:
    """One host's disk: its log and hard-state journal, reopened after each crash."""

    def __init__(self, host: str, rng: random.Random, mode: str) -> None:
        if mode not in DISK_MODES[1:]:
            raise ValueError(f"disk mode {mode!r} is not a simulated disk: use sim")
        self.host = host
        self.rng = rng
        self.lying = mode == "sim-lying-fsync"
        self.retrying = mode == "sim-retries-fsync"
        self.error_rate = 0.0  # of each write and fsync, while errors are on (`set_errors`)
        self.errors_on = False
        self.disk = SimDisk(random.Random(rng.getrandbits(64)))
        self.journal: StateJournal | None = None
        self.flipped: list[tuple[str, int]] = []  # (file, byte) of each bit flipped at rest

    def open(self) -> tuple[DiskLog, HardState]:
        """The log and hard state the disk holds, through the real recovery; `DiskDamaged` if
        a flipped bit made it refuse, a `Violation` if a crash alone did."""
        kind = _LyingLog if self.lying else _RetryingLog if self.retrying else SegmentedLog
        self.disk.set_error_rate(0.0)  # recovery runs on a quiet disk (see the module docstring)
        try:
            segments = kind(_LOG_DIR, _CONFIG, handles=FileHandles(disk=self.disk))
            log = DiskLog(segments)
            self.journal = StateJournal(_JOURNAL, disk=self.disk)
        except (StorageError, LogError, OSError) as error:
            if self.flipped:
                raise DiskDamaged(f"{self.host}: {error}") from None
            raise Violation(
                "storage-recovery",
                f"{self.host}'s disk cannot be reopened after a crash: "
                f"{type(error).__name__}: {error}",
            ) from None
        state = self.journal.load(_GROUP)
        self._arm()
        return log, state

    def set_errors(self, on: bool) -> None:
        """Injected write and fsync errors on (chaos) or off (calm, when liveness is checked)."""
        self.errors_on = on
        self._arm()

    def _arm(self) -> None:
        rate = self.error_rate if self.errors_on else 0.0
        operations = ("fsync",) if self.retrying else ("write", "fsync")
        self.disk.set_error_rate(rate, operations)

    def save(self, state: HardState) -> None:
        """Durable on return (`StateJournal.save_many`)."""
        assert self.journal is not None
        self.journal.save_many({_GROUP: state})

    def crash(self, log: DiskLog, flip: bool = False) -> tuple[DiskLog, HardState]:
        """Power loss, then (given `flip`) one bit flipped at rest (`_flip`), then a restart's
        recovery. What `log` claimed durable must be there after it (`durability-claim`):
        the storage's own promise, checked on every host, so a lie on one host is caught even
        while the others hold every committed entry."""
        claimed = log.durable_last_index
        claimed_term = log.term(claimed) if claimed >= log.first_index else None
        self.disk.crash()
        if flip:
            self._flip()
        reopened, state = self.open()
        if claimed_term is not None and reopened.durable_boundary.index < claimed:
            held = reopened.term(claimed) if claimed <= reopened.last_index else None
            if held != claimed_term:
                raise Violation(
                    "durability-claim",
                    f"{self.host}'s log claimed entry {claimed} (term {claimed_term}) durable; "
                    f"after a crash it holds {'nothing' if held is None else f'term {held}'} there",
                )
        return reopened, state

    def _flip(self) -> None:
        """Flips one bit of the first entry of a segment holding two or more: a bad entry with
        a valid one after it, which recovery must refuse rather than cut as a torn tail."""
        if self.disk.kind(_LOG_DIR) is None:
            return  # the crash took a log never made durable (nothing in it was fsynced yet)
        for name in sorted(self.disk.listdir(_LOG_DIR)):
            path = f"{_LOG_DIR}/{name}"
            data = self.disk.read_file(path) if name.endswith(".log") else None
            if not data or len(data) < HEADER_SIZE:
                continue
            first = HEADER_SIZE + HEADER.unpack_from(data, 0)[0]
            if len(data) >= first + HEADER_SIZE:
                where = self.disk.flip(path, self.rng.randrange(first))
                self.flipped.append((path, where))
                return

    def wipe(self, kept: HardState) -> tuple[DiskLog, HardState]:
        """A retired replica's log deleted: a fresh disk holding only `kept`."""
        self.disk = SimDisk(random.Random(self.rng.getrandbits(64)))
        log, _ = self.open()
        self.disk.set_error_rate(0.0)
        self.save(kept)
        self._arm()
        return log, kept
