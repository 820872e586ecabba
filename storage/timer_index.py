"""One replica's on-disk index of one timer partition's pending timers (delayed delivery,
issue 26), derived from its committed timer log. Formats: `storage.timer_files`.

    <directory>/state            the commit point, replaced atomically: applied_offset, the
                                 highest offset added, the last plan, the journal's length,
                                 per pending bucket (records, batches, file bytes, lowest
                                 pending offset)
    <directory>/journal          entries of every bucket since the last compaction
    <directory>/<bucket>.bucket  entries of one bucket: due times [b * bucket_ms, (b+1) * bucket_ms)

Entries (ADDED a batch, FIRED an offset) are 32 bytes, checksummed. `flush` appends what came
since the last flush to the journal and fsyncs it (one fsync, however many buckets the entries
touch), then replaces the state. When the journal outgrows `journal_max_bytes`, the flush moves
its entries into their bucket files (one fsync per bucket, amortised over the journal), then
writes a state naming the new lengths and an empty journal, then empties the journal.

`summary()` answers from the per-bucket counts (no entry is read); `bucket(b)` reads one bucket
file and the journal. Memory: the per-bucket counts, plus the entries since the last flush (32
bytes each; the node flushes about every second). No file is held open.

Crash safety: reopening cuts the journal and every bucket file back to the lengths the state
names (a torn or unflushed tail: written after the last flush, replayed by the node from
`applied_offset`), deletes bucket files the state does not name (made since, or fully fired),
and refuses a file shorter than the state names (`CorruptTimerIndex`). A bad entry inside the
flushed part of a file is damage, never dropped: reading it raises `CorruptTimerIndex`. So after
a crash at any byte the index is exactly as of its last completed flush, and `applied_offset`
(every timer-log record below it is reflected) is at or before every record it does not hold.

Started from a cut log (`start_offset`: a replica reset to its leader's log start, or rebuilt,
folds the log from its first offset into a fresh index): every timer pending there lies at or
above it (a log is cut only below what its indexes still need, and what a floor frees was
rolled forward), so a reference below it is to a record outside the index: a plan's batch
there was pending and is fired now (skipped), a copy of a batch there is live (added).

Replays are harmless: adds arrive in timer-log order, so an add whose offset is not above the
highest added is a repeat, ignored; a plan whose (epoch, sequence) is below the next one
expected (the last plan's epoch and sequence + its record count), likewise (by the sequence of
its own batches: a plan may list the previous plan's again first, `timers.types`). A bucket whose
batches all fired leaves the next state and its file is deleted.

Threads: `add`, `planned` and the reads of counts take a short lock and never wait for I/O;
`flush` and `bucket` (blocking I/O: run them off the event loop) are serialised with each other.
A failed write or fsync is fail-stop (`StorageFailed`, then and on every later call).

Why one module of ~520 lines: the journal, the bucket files and the state are one commit
protocol (what a flush writes, in which order, and what a reopen cuts back to); split, each part
would be correct only together with the others. The byte formats live apart in `timer_files.py`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from storage.atomic import fsync_directory, write_atomic
from storage.disk import OS_DISK, Disk, OsDisk
from storage.errors import InvalidArgument, LogClosed, StorageFailed
from storage.timer_files import (
    ADDED,
    ENTRY_SIZE,
    FIRED,
    BucketState,
    CorruptTimerIndex,
    IndexState,
    check_entries,
    decode_state,
    encode_entry,
    encode_state,
    entries_of,
    file_size,
    group_by_bucket,
    read_prefix,
    truncate,
)
from timers.types import Plan, Rolled, TimerBatch

__all__ = [
    "ENTRY_SIZE",
    "INDEX_DIRECTORY",
    "JOURNAL_MAX_BYTES",
    "CorruptTimerIndex",
    "TimerIndex",
]

# a timer log replica's index lives in this directory of the replica's, beside its log; derived
# from that log, it goes wherever the log goes (a retired replica, a rebuilt one)
INDEX_DIRECTORY = "timer_index"

JOURNAL_MAX_BYTES = 4 << 20  # 131,072 entries: then they move to their bucket files
STATE_NAME, JOURNAL_NAME, SUFFIX = "state", "journal", ".bucket"
_SYNC_THREADS = 16


class TimerIndex:
    def __init__(self, directory: str, bucket_ms: int, disk: Disk, journal_max_bytes: int):
        self.directory = directory
        self.bucket_ms = bucket_ms
        self.journal_max_bytes = journal_max_bytes
        self._disk = disk
        self._lock = threading.Lock()  # the counts and the buffer: never held during I/O
        self._io_lock = threading.Lock()  # flushes and reads, one at a time
        self._buckets: dict[int, BucketState] = {}
        self._pending = 0
        self._applied_offset = 0
        self._added_through = -1
        self._start_offset = 0
        self._last_plan_offset = -1
        self._last_plan: Plan | None = None
        self._next_plan = (0, 0)  # (epoch, sequence) the next plan continues
        self._buffer = bytearray()  # entries since the last flush
        self._changed = False  # anything added or planned since the last flush
        self._journal_bytes = 0
        self._failed: StorageFailed | None = None
        self._closed = False
        self._unsynced_dirs: list[str] = []
        self.truncated_bytes = 0  # cut from file tails at open (unflushed or torn)
        self.removed_files = 0  # bucket files deleted at open (not in the state)
        self.compactions = 0

    # -- open ------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        bucket_ms: int,
        *,
        disk: Disk = OS_DISK,
        journal_max_bytes: int = JOURNAL_MAX_BYTES,
        start_offset: int = 0,
    ) -> TimerIndex:
        """The index in `directory` (created if missing), exactly as of its last flush. A new
        one folds the timer log from `start_offset` (the log's first offset)."""
        if bucket_ms < 1:
            raise InvalidArgument(f"bucket_ms {bucket_ms}: must be >= 1")
        if journal_max_bytes < ENTRY_SIZE:
            raise InvalidArgument(f"journal_max_bytes {journal_max_bytes}: must be >= {ENTRY_SIZE}")
        path = os.path.abspath(os.fspath(directory))
        index = cls(path, bucket_ms, disk, journal_max_bytes)
        created = disk.makedirs(path)
        index._unsynced_dirs = [os.path.dirname(d) for d in created]  # durable at first flush
        index._start_offset = index._applied_offset = start_offset
        index._added_through = start_offset - 1
        index._recover()  # an index flushed before keeps its own
        return index

    def _recover(self) -> None:
        disk, state_path = self._disk, self._file(STATE_NAME)
        data = disk.read_file(state_path)
        if data is not None:
            state = decode_state(data, state_path)
            if state.bucket_ms != self.bucket_ms:
                raise InvalidArgument(
                    f"{state_path}: the index was built with bucket_ms {state.bucket_ms}, "
                    f"not {self.bucket_ms}"
                )
            self._applied_offset, self._added_through = state.applied_offset, state.added_through
            self._start_offset = state.start_offset
            self._last_plan_offset = state.last_plan_offset
            self._set_last_plan(state.last_plan)
            self._journal_bytes = state.journal_bytes
            self._buckets = state.buckets
            self._pending = sum(s.records for s in state.buckets.values())
        # check every length before changing anything
        sizes = {
            name: file_size(self._disk, self._file(name))
            for name in [JOURNAL_NAME, *map(_name, self._buckets)]
        }
        wanted = {JOURNAL_NAME: self._journal_bytes}
        wanted.update((_name(b), s.file_bytes) for b, s in self._buckets.items())
        for name, size in sizes.items():
            if (size or 0) < wanted[name]:
                raise CorruptTimerIndex(
                    f"{self._file(name)} holds {size or 0} bytes, fewer than the "
                    f"{wanted[name]} its last flush made durable"
                )
        for name, size in sizes.items():
            if size is not None and size > wanted[name]:
                truncate(self._disk, self._file(name), wanted[name])
                self.truncated_bytes += size - wanted[name]
        removed = False
        for name in disk.listdir(self.directory):
            if (name.endswith(SUFFIX) and name not in sizes) or name.endswith(".tmp"):
                disk.unlink(self._file(name))
                self.removed_files += name.endswith(SUFFIX)
                removed = True
        if removed:
            fsync_directory(self.directory, disk)

    # -- the timer log, in order -----------------------------------------------------------------
    def add(self, batch: TimerBatch) -> None:
        """A timer batch committed in the timer log (in log order; a repeat is ignored)."""
        if batch.record_count < 1 or batch.offset < 0:
            raise InvalidArgument(
                f"timer batch at offset {batch.offset} with {batch.record_count} records: "
                "an offset >= 0 and at least one record are needed"
            )
        with self._lock:
            self._check_usable()
            if batch.offset <= self._added_through:
                return
            self._add_locked(batch)

    def _add_locked(self, batch: TimerBatch) -> None:
        bucket = batch.due_ms // self.bucket_ms
        state = self._buckets.get(bucket)
        if state is None:
            state = self._buckets[bucket] = BucketState()
        self._buffer += encode_entry(ADDED, batch)
        state.records += batch.record_count
        state.batches += 1
        if state.min_offset < 0 or batch.offset < state.min_offset:
            state.min_offset = batch.offset
        self._pending += batch.record_count
        self._added_through = batch.offset
        self._changed = True

    def planned(self, plan: Plan, offset: int = -1) -> None:
        """A plan record committed in the timer log at `offset`: its batches are fired; it is
        the last plan (a repeat of an applied plan is ignored). The log keeps the last plan's
        record (`min_pending_offset`): an index started past it would not know the sequence
        the next plan continues."""
        with self._lock:
            self._check_usable()
            if plan.start < self._next_plan:
                return
            for batch in plan.own:  # (a carried batch was marked with its own plan)
                state = self._buckets.get(batch.due_ms // self.bucket_ms)
                if state is None or state.batches == 0 or batch.offset < self._start_offset:
                    continue  # nothing pending there to mark
                self._buffer += encode_entry(FIRED, batch)
                state.records -= batch.record_count
                state.batches -= 1
                self._pending -= batch.record_count
            self._set_last_plan(plan)
            self._last_plan_offset = offset
            self._changed = True

    def rolled(self, roll: Rolled) -> None:
        """A copy rolled forward committed in the timer log: it supersedes its original (its
        FIRED entry and the copy's ADDED entry; the bucket's counts stay). A repeat is ignored,
        and so is a copy into a bucket with nothing pending (its original is not: dead)."""
        copy = roll.batch
        if copy.record_count < 1 or not 0 <= roll.from_offset < copy.offset:
            raise InvalidArgument(
                f"copy at offset {copy.offset} of offset {roll.from_offset} with "
                f"{copy.record_count} records: a copy follows its original (offset >= 0) and "
                "holds at least one record"
            )
        with self._lock:
            self._check_usable()
            if copy.offset <= self._added_through:
                return
            if roll.from_offset < self._start_offset:  # its original is outside: it is live
                self._add_locked(copy)
                return
            self._added_through = copy.offset
            self._changed = True
            state = self._buckets.get(copy.due_ms // self.bucket_ms)
            if state is None or state.batches == 0:
                return
            original = TimerBatch(copy.due_ms, roll.from_offset, copy.record_count)
            self._buffer += encode_entry(FIRED, original) + encode_entry(ADDED, copy)

    def floor(self, offset: int) -> None:
        """A floor record committed: no pending timer lies below `offset` from here on (every
        one there was rolled forward), so no bucket's lowest pending offset is below it."""
        with self._lock:
            self._check_usable()
            for state in self._buckets.values():
                if state.batches and state.min_offset < offset:
                    state.min_offset = offset
                    self._changed = True

    # -- reads -----------------------------------------------------------------------------------
    @property
    def applied_offset(self) -> int:
        """Every timer-log record below this offset is reflected (as of the last flush, after a
        reopen): the node replays the log from here."""
        return self._applied_offset

    @property
    def last_plan(self) -> Plan | None:
        return self._last_plan

    @property
    def last_plan_offset(self) -> int:
        """Where the last plan's record is in the timer log (-1: not known)."""
        return self._last_plan_offset

    @property
    def start_offset(self) -> int:
        """The first timer-log offset this index folded (0: the whole log)."""
        return self._start_offset

    @property
    def pending(self) -> int:
        """Pending records, in every bucket."""
        return self._pending

    def summary(self) -> dict[int, tuple[int, int]]:
        """bucket -> (pending records, pending batches), from the counts (no entry is read)."""
        with self._lock:
            return {b: (s.records, s.batches) for b, s in self._buckets.items() if s.batches}

    def min_pending_offset(self) -> int:
        """The lowest timer-log offset this index still needs, for the log's retention (delete
        only below it): the durable `applied_offset` (a restart replays from there), pending
        timers (a lower bound per bucket, exact once the bucket has been read), the last
        plan's batches (a new leader fires them again) and its record (its sequence)."""
        with self._lock:
            offsets = [s.min_offset for s in self._buckets.values() if s.batches]
            if self._last_plan is not None:
                offsets.extend(b.offset for b in self._last_plan.batches)
            if self._last_plan_offset >= 0:
                offsets.append(self._last_plan_offset)
            return min([*offsets, self._applied_offset])

    def buckets_below(self, offset: int) -> dict[int, int]:
        """bucket -> a lower bound of its lowest pending offset, for each bucket with pending
        timers that may lie below `offset` (what a roll round reads)."""
        with self._lock:
            return {
                b: s.min_offset
                for b, s in self._buckets.items()
                if s.batches and s.min_offset < offset
            }

    def bucket(self, bucket: int) -> list[TimerBatch]:
        """The pending timer batches of `bucket`, in (due, offset) order (fired ones left out).
        Raises `CorruptTimerIndex` on a bad entry of the bucket."""
        return self.buckets([bucket])[bucket]

    def buckets(self, wanted: Iterable[int]) -> dict[int, list[TimerBatch]]:
        """`bucket` of each of `wanted`, reading (and checking) the journal once for them all:
        a leader's near window after a restart or a failover is several buckets, and the
        journal holds up to `journal_max_bytes` of every bucket's entries."""
        wanted = list(wanted)
        with self._io_lock:
            with self._lock:
                self._check_usable()
                states = {
                    b: state
                    for b in wanted
                    if (state := self._buckets.get(b)) is not None and state.batches
                }
                sizes = {b: state.file_bytes for b, state in states.items()}
                journal_bytes = self._journal_bytes
                buffered = bytes(self._buffer)
            added: dict[int, dict[int, TimerBatch]] = {b: {} for b in states}
            fired: dict[int, set[int]] = {b: set() for b in states}
            if states:
                sources = [(self._file(_name(b)), size) for b, size in sizes.items()]
                sources.append((self._file(JOURNAL_NAME), journal_bytes))
                for where, data in [
                    (path, read_prefix(self._disk, path, size)) for path, size in sources
                ] + [("entries not flushed", buffered)]:
                    for kind, bucket, batch in entries_of(data, where, added, self.bucket_ms):
                        if kind == ADDED:
                            added[bucket][batch.offset] = batch
                        else:
                            fired[bucket].add(batch.offset)
            found = {
                b: sorted(batch for offset, batch in added[b].items() if offset not in fired[b])
                for b in states
            }
            with self._lock:
                for b, pending in found.items():
                    if self._buckets.get(b) is states[b] and pending:
                        states[b].min_offset = min(batch.offset for batch in pending)
            return {b: found.get(b, []) for b in wanted}

    # -- durability ------------------------------------------------------------------------------
    def flush(self, applied_offset: int) -> None:
        """Makes everything added and planned so far durable, with `applied_offset` (every
        timer-log record below it is reflected); nothing to do (no I/O) if nothing changed. A
        failed write or fsync raises `StorageFailed`, and so does every later call (fail-stop)."""
        with self._io_lock:
            with self._lock:
                self._check_usable()
                if applied_offset < self._applied_offset:
                    raise InvalidArgument(
                        f"applied offset {applied_offset} is below the index's "
                        f"{self._applied_offset}: it only moves forward"
                    )
                if not self._changed and applied_offset == self._applied_offset:
                    return  # nothing new: an idle partition costs no fsync
                self._changed = False
                appended = bytes(self._buffer)
                self._buffer.clear()
                snapshot = IndexState(
                    self.bucket_ms,
                    applied_offset,
                    self._added_through,
                    self._last_plan,
                    self._journal_bytes + len(appended),
                    {b: replace(s) for b, s in self._buckets.items() if s.batches},
                    self._start_offset,
                    self._last_plan_offset,
                )
                emptied = [b for b, s in self._buckets.items() if not s.batches]
            try:
                self._write(appended, snapshot, emptied)
                if snapshot.journal_bytes > self.journal_max_bytes:
                    self._compact(snapshot)
            except OSError as error:
                with self._lock:
                    self._failed = StorageFailed(
                        f"timer index {self.directory}: flush failed ({error}); it takes no "
                        "more writes, and what it did not flush before is not durable",
                        error.errno,
                    )
                raise self._failed from error

    def _write(self, appended: bytes, snapshot: IndexState, emptied: list[int]) -> None:
        disk = self._disk
        if appended:
            fd = disk.open(self._file(JOURNAL_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                disk.write_all(fd, appended)
                disk.fsync(fd)
            finally:
                disk.close(fd)
            if snapshot.journal_bytes == len(appended):  # a new journal: its name first
                self._unsynced_dirs.append(self.directory)
        self._sync_dirs()
        write_atomic(self._file(STATE_NAME), encode_state(snapshot), disk)
        with self._lock:
            self._journal_bytes = snapshot.journal_bytes
            self._applied_offset = snapshot.applied_offset
            gone = []
            for bucket in emptied:
                left = self._buckets.get(bucket)
                if left is not None and not left.batches:
                    del self._buckets[bucket]
                    if left.file_bytes:
                        gone.append(bucket)
        for bucket in gone:
            disk.unlink(self._file(_name(bucket)))
        if gone:
            fsync_directory(self.directory, disk)

    def _compact(self, snapshot: IndexState) -> None:
        """Moves the journal's entries into their bucket files (pending buckets only: the
        entries of a bucket all fired net to nothing), then empties the journal."""
        journal = read_prefix(self._disk, self._file(JOURNAL_NAME), snapshot.journal_bytes)
        check_entries(journal, self._file(JOURNAL_NAME))  # none dropped unseen
        moved = {
            bucket: positions
            for bucket, positions in group_by_bucket(journal, self.bucket_ms).items()
            if bucket in snapshot.buckets
        }
        disk, buckets = self._disk, dict(snapshot.buckets)

        def append(bucket: int) -> None:
            data = b"".join([journal[at : at + ENTRY_SIZE] for at in moved[bucket]])
            fd = disk.open(self._file(_name(bucket)), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                disk.write_all(fd, data)
                disk.fsync(fd)
            finally:
                disk.close(fd)

        if isinstance(disk, OsDisk) and len(moved) > 1:
            # the real file system commits concurrent fsyncs together: far fewer waits
            with ThreadPoolExecutor(min(_SYNC_THREADS, len(moved))) as pool:
                list(pool.map(append, moved))
        else:  # a simulated disk is driven from one thread
            for bucket in moved:
                append(bucket)
        created = any(buckets[bucket].file_bytes == 0 for bucket in moved)
        for bucket, positions in moved.items():
            grown = buckets[bucket].file_bytes + ENTRY_SIZE * len(positions)
            buckets[bucket] = replace(buckets[bucket], file_bytes=grown)
        if created:
            fsync_directory(self.directory, disk)
        write_atomic(
            self._file(STATE_NAME),
            encode_state(replace(snapshot, journal_bytes=0, buckets=buckets)),
            disk,
        )
        with self._lock:
            for bucket in moved:
                self._buckets[bucket].file_bytes = buckets[bucket].file_bytes
            self._journal_bytes = 0
        truncate(self._disk, self._file(JOURNAL_NAME), 0)
        self.compactions += 1

    def close(self) -> None:
        """Closes the index (no descriptor is held; what was not flushed is not durable)."""
        with self._lock:
            self._closed = True

    @property
    def failed(self) -> StorageFailed | None:
        return self._failed

    # -- internals -------------------------------------------------------------------------------
    def _set_last_plan(self, plan: Plan | None) -> None:
        self._last_plan = plan
        self._next_plan = (0, 0) if plan is None else plan.after

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise LogClosed(f"timer index {self.directory} is closed")

    def _sync_dirs(self) -> None:
        for directory in self._unsynced_dirs:
            fsync_directory(directory, self._disk)
        self._unsynced_dirs = []

    def _file(self, name: str) -> str:
        return os.path.join(self.directory, name)


def _name(bucket: int) -> str:
    return f"{bucket}{SUFFIX}"
