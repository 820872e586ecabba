"""One replica's on-disk index of one timer partition's pending timers (delayed delivery,
issue 26), derived from its committed timer log: bucket files of fixed-size entries, and a small
state file that is the index's commit point.

    <directory>/state            length u32 | xxh3-64 u64 | msgpack body, replaced atomically:
                                 version, bucket_ms, applied_offset, added_through, last plan,
                                 per bucket [bucket, pending records, pending batches, file
                                 bytes, lowest pending offset (a lower bound)]
    <directory>/<bucket>.bucket  32-byte entries, append-only:
                                 kind u8 | pad 3 | record_count u32 | due_ms i64 | offset u64
                                 | xxh3-64 of the 24 bytes before it u64
                                 kind ADDED: a timer batch; kind FIRED: that offset was planned

A bucket holds the due times [bucket * bucket_ms, (bucket + 1) * bucket_ms). `summary()` answers
from the per-bucket counts alone (no entry is read); `bucket(b)` reads one file. Nothing per
entry stays in memory but the entries added or fired since the last `flush` (32 bytes each; the
node flushes about every second), so memory is the per-bucket counts.

Crash safety. `flush(applied_offset)` writes and fsyncs every bucket file appended to, then
replaces the state file atomically: the state names each bucket file's length at that moment.
Reopening cuts every bucket file back to the length the state names (a torn or unflushed tail:
entries written after the last flush, which the node replays from `applied_offset`), deletes
bucket files the state does not name (created since, or fully fired), and refuses a file shorter
than the state names (`CorruptTimerIndex`). A bad entry inside the flushed part of a file is
damage, never dropped: reading that bucket raises `CorruptTimerIndex`. So after a crash at any
byte the index is exactly as of its last flush, and `applied_offset` (every timer-log record
below it is reflected) is at or before every record it does not hold.

Replays are harmless: adds arrive in timer-log order, so an add whose offset is not above the
highest added (`added_through`) is a repeat and ignored; a plan whose sequence is below the next
expected one (the last plan's sequence + its record count) likewise.

A bucket whose batches have all fired is left out of the next state and its file deleted.
Files are open only while a flush appends to them or `bucket` reads them: thousands of timer
partitions hold no descriptors. Thread-safety: every method may be called from any thread;
`flush` does its I/O outside the lock that `add`/`planned`/`summary` take (they never wait for
an fsync), and flushes are serialised among themselves. `bucket`, `flush`, `open` and `close`
do blocking I/O: run them off the event loop.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

import msgpack
import xxhash

from storage.atomic import fsync_directory, write_atomic
from storage.disk import OS_DISK, Disk
from storage.errors import CorruptLog, InvalidArgument, LogClosed, StorageFailed
from timers.types import Plan, TimerBatch

__all__ = ["ENTRY_SIZE", "CorruptTimerIndex", "TimerIndex"]

_ENTRY = struct.Struct("<B3xIqQ")
_CHECK = struct.Struct("<Q")
ENTRY_SIZE = _ENTRY.size + _CHECK.size  # 32
_ADDED, _FIRED = 1, 2
_PREFIX = struct.Struct("<IQ")
_VERSION = 1
STATE_NAME = "state"
_SUFFIX = ".bucket"
_xxh3 = xxhash.xxh3_64_intdigest


class CorruptTimerIndex(CorruptLog):
    """The index is damaged beyond what recovery may repair (a bad entry in a flushed part of
    a bucket file, a bucket file shorter than its state says, a bad state file). Nothing was
    changed; rebuild the index from the timer log (replay it from offset 0)."""


def _entry(kind: int, batch: TimerBatch) -> bytes:
    body = _ENTRY.pack(kind, batch.record_count, batch.due_ms, batch.offset)
    return body + _CHECK.pack(_xxh3(body))


@dataclass(slots=True)
class _Bucket:
    records: int = 0  # pending records
    batches: int = 0  # pending batches
    file_bytes: int = 0  # bytes in the file (written by a flush; after open: the state's)
    min_offset: int = -1  # lowest pending offset, or a lower bound of it; -1: none
    buffer: bytearray = field(default_factory=bytearray)  # entries not handed to a flush yet
    inflight: bytes = b""  # entries a flush is writing


class TimerIndex:
    def __init__(self, directory: str, bucket_ms: int, disk: Disk) -> None:
        self.directory = directory
        self.bucket_ms = bucket_ms
        self._disk = disk
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._buckets: dict[int, _Bucket] = {}
        self._pending = 0
        self._applied_offset = 0
        self._added_through = -1
        self._last_plan: Plan | None = None
        self._next_sequence = 0
        self._failed: StorageFailed | None = None
        self._closed = False
        self._unsynced_dirs: list[str] = []
        self.truncated_bytes = 0  # cut from bucket file tails at open (unflushed or torn)
        self.removed_files = 0  # bucket files deleted at open (not in the state)

    # -- open ------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], bucket_ms: int, *, disk: Disk = OS_DISK
    ) -> TimerIndex:
        """The index in `directory` (created if missing), exactly as of its last flush."""
        if bucket_ms < 1:
            raise InvalidArgument(f"bucket_ms {bucket_ms}: must be >= 1")
        path = os.path.abspath(os.fspath(directory))
        index = cls(path, bucket_ms, disk)
        created = disk.makedirs(path)
        if created:  # their names become durable with the first flush
            index._unsynced_dirs = [os.path.dirname(d) for d in created]
        index._recover()
        return index

    def _recover(self) -> None:
        disk, state_path = self._disk, os.path.join(self.directory, STATE_NAME)
        data = disk.read_file(state_path)
        if data is not None:
            self._load_state(state_path, data)
        removed = False
        for name in disk.listdir(self.directory):
            bucket = _bucket_of_name(name)
            if name == STATE_NAME or (bucket is not None and bucket in self._buckets):
                continue
            if bucket is not None or name.endswith(".tmp"):
                disk.unlink(os.path.join(self.directory, name))
                self.removed_files += bucket is not None
                removed = True
        for bucket, state in self._buckets.items():
            self._cut_tail(bucket, state.file_bytes)
        if removed:
            fsync_directory(self.directory, disk)

    def _load_state(self, path: str, data: bytes) -> None:
        try:
            length, checksum = _PREFIX.unpack_from(data, 0)
            body = data[_PREFIX.size : _PREFIX.size + length]
            if len(body) != length or _xxh3(body) != checksum:
                raise ValueError("checksum mismatch or short body")
            state: dict[str, Any] = msgpack.unpackb(body, strict_map_key=False)
            version, bucket_ms = state["version"], state["bucket_ms"]
            applied, added_through = state["applied"], state["added_through"]
            plan, buckets = state["plan"], state["buckets"]
        except (struct.error, ValueError, TypeError, KeyError, msgpack.UnpackException) as error:
            raise CorruptTimerIndex(f"{path}: not a valid timer index state ({error})") from error
        if version != _VERSION:
            raise CorruptTimerIndex(f"{path}: version {version}, this code reads {_VERSION}")
        if bucket_ms != self.bucket_ms:
            raise InvalidArgument(
                f"{path}: the index was built with bucket_ms {bucket_ms}, not {self.bucket_ms}"
            )
        self._applied_offset, self._added_through = applied, added_through
        if plan is not None:
            self._last_plan = Plan(plan[0], tuple(TimerBatch(*b) for b in plan[1]))
            self._next_sequence = self._last_plan.sequence + self._last_plan.record_count
        for bucket, records, batches, file_bytes, min_offset in buckets:
            self._buckets[bucket] = _Bucket(records, batches, file_bytes, min_offset)
            self._pending += records

    def _cut_tail(self, bucket: int, file_bytes: int) -> None:
        path = self._path(bucket)
        try:
            fd = self._disk.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        if fd < 0:
            if file_bytes:
                raise CorruptTimerIndex(f"{path} is missing; the state names {file_bytes} bytes")
            return
        try:
            size = self._disk.size(fd)
            if size < file_bytes:
                raise CorruptTimerIndex(
                    f"{path} holds {size} bytes, fewer than the {file_bytes} its last flush made "
                    "durable"
                )
            if size > file_bytes:
                self._disk.ftruncate(fd, file_bytes)
                self._disk.fsync(fd)
                self.truncated_bytes += size - file_bytes
        finally:
            self._disk.close(fd)

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
            bucket = batch.due_ms // self.bucket_ms
            state = self._buckets.get(bucket)
            if state is None:
                state = self._buckets[bucket] = _Bucket()
            state.buffer += _entry(_ADDED, batch)
            state.records += batch.record_count
            state.batches += 1
            if state.min_offset < 0 or batch.offset < state.min_offset:
                state.min_offset = batch.offset
            self._pending += batch.record_count
            self._added_through = batch.offset

    def planned(self, plan: Plan) -> None:
        """A plan record committed in the timer log: its batches are fired; it is the last plan
        (a repeat of an applied plan is ignored)."""
        with self._lock:
            self._check_usable()
            if plan.sequence < self._next_sequence:
                return
            for batch in plan.batches:
                state = self._buckets.get(batch.due_ms // self.bucket_ms)
                if state is None or state.batches == 0:
                    continue  # not indexed here: nothing pending to mark
                state.buffer += _entry(_FIRED, batch)
                state.records -= batch.record_count
                state.batches -= 1
                self._pending -= batch.record_count
            self._last_plan = plan
            self._next_sequence = plan.sequence + plan.record_count

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
    def pending(self) -> int:
        """Pending records, in every bucket."""
        return self._pending

    def summary(self) -> dict[int, tuple[int, int]]:
        """bucket -> (pending records, pending batches), from the counts (no entry is read)."""
        with self._lock:
            return {b: (s.records, s.batches) for b, s in self._buckets.items() if s.batches}

    def min_pending_offset(self) -> int | None:
        """A lower bound of the lowest timer-log offset still needed: pending timers and the last
        plan's batches (a new leader fires them again). None: nothing is needed. The bound is
        exact for a bucket once it has been read (`bucket`)."""
        with self._lock:
            offsets = [s.min_offset for s in self._buckets.values() if s.batches]
            if self._last_plan is not None:
                offsets.extend(b.offset for b in self._last_plan.batches)
            return min(offsets) if offsets else None

    def bucket(self, bucket: int) -> list[TimerBatch]:
        """The pending timer batches of `bucket`, in (due, offset) order (fired ones left out).
        Raises `CorruptTimerIndex` on a bad entry."""
        with self._lock:
            self._check_usable()
            state = self._buckets.get(bucket)
            if state is None:
                return []
            file_bytes, tail = state.file_bytes, state.inflight + bytes(state.buffer)
        path = self._path(bucket)
        data = b""
        if file_bytes:
            fd = self._disk.open(path, os.O_RDONLY)
            try:
                data = self._disk.pread(fd, file_bytes, 0)
            finally:
                self._disk.close(fd)
            if len(data) < file_bytes:
                raise CorruptTimerIndex(f"{path}: {len(data)} bytes, {file_bytes} expected")
        added: dict[int, TimerBatch] = {}
        fired: set[int] = set()
        for where, view in ((path, memoryview(data)), (f"{path} (unflushed)", memoryview(tail))):
            for position in range(0, len(view) - ENTRY_SIZE + 1, ENTRY_SIZE):
                body = view[position : position + _ENTRY.size]
                (checksum,) = _CHECK.unpack_from(view, position + _ENTRY.size)
                if _xxh3(body) != checksum:
                    raise CorruptTimerIndex(
                        f"{where}: entry {position // ENTRY_SIZE} at byte {position} fails its "
                        "checksum; it was flushed, so this is damage, not a torn tail"
                    )
                kind, count, due_ms, offset = _ENTRY.unpack(body)
                if kind == _ADDED:
                    added[offset] = TimerBatch(due_ms, offset, count)
                elif kind == _FIRED:
                    fired.add(offset)
                else:
                    raise CorruptTimerIndex(f"{where}: entry at byte {position} has kind {kind}")
        pending = sorted(b for offset, b in added.items() if offset not in fired)
        with self._lock:
            if self._buckets.get(bucket) is state and pending:
                state.min_offset = min(b.offset for b in pending)
        return pending

    # -- durability ------------------------------------------------------------------------------
    def flush(self, applied_offset: int) -> None:
        """Makes everything added and planned so far durable, with `applied_offset` (every
        timer-log record below it is reflected): bucket files fsynced, then the state replaced
        atomically, then fully fired buckets' files deleted. A failed write or fsync raises
        `StorageFailed`, and so does every later call (fail-stop)."""
        with self._flush_lock:
            with self._lock:
                self._check_usable()
                if applied_offset < self._applied_offset:
                    raise InvalidArgument(
                        f"applied offset {applied_offset} is below the index's "
                        f"{self._applied_offset}: it only moves forward"
                    )
                jobs = []
                for bucket, state in self._buckets.items():
                    if state.buffer:
                        state.inflight = bytes(state.buffer)
                        state.buffer = bytearray()
                        jobs.append((bucket, state, state.file_bytes == 0))
                body = self._state_body(applied_offset)
                emptied = [b for b, s in self._buckets.items() if not s.batches and not s.buffer]
            try:
                self._write(jobs, body, emptied, applied_offset)
            except OSError as error:
                with self._lock:
                    self._failed = StorageFailed(
                        f"timer index {self.directory}: flush failed ({error}); it takes no "
                        "more writes, and what it did not flush before is not durable",
                        error.errno,
                    )
                raise self._failed from error

    def _state_body(self, applied_offset: int) -> bytes:
        plan = self._last_plan
        buckets = [
            [b, s.records, s.batches, s.file_bytes + len(s.inflight), s.min_offset]
            for b, s in self._buckets.items()
            if s.batches
        ]
        body: bytes = msgpack.packb(
            {
                "version": _VERSION,
                "bucket_ms": self.bucket_ms,
                "applied": applied_offset,
                "added_through": self._added_through,
                "plan": None
                if plan is None
                else [plan.sequence, [[b.due_ms, b.offset, b.record_count] for b in plan.batches]],
                "buckets": buckets,
            }
        )
        return _PREFIX.pack(len(body), _xxh3(body)) + body

    def _write(
        self, jobs: list[tuple[int, _Bucket, bool]], body: bytes, emptied: list[int], applied: int
    ) -> None:
        disk = self._disk
        for bucket, state, _ in jobs:
            fd = disk.open(self._path(bucket), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                disk.write_all(fd, state.inflight)
                disk.fsync(fd)
            finally:
                disk.close(fd)
            with self._lock:
                state.file_bytes += len(state.inflight)
                state.inflight = b""
        if self._unsynced_dirs:
            for directory in self._unsynced_dirs:
                fsync_directory(directory, disk)
            self._unsynced_dirs = []
        if any(new for _, _, new in jobs):
            fsync_directory(self.directory, disk)  # new bucket files' names before the state
        write_atomic(os.path.join(self.directory, STATE_NAME), body, disk)
        with self._lock:
            self._applied_offset = applied
            gone = []
            for bucket in emptied:
                left = self._buckets.get(bucket)
                if left is not None and not left.batches and not left.buffer:
                    del self._buckets[bucket]
                    if left.file_bytes:
                        gone.append(bucket)
        for bucket in gone:
            disk.unlink(self._path(bucket))
        if gone:
            fsync_directory(self.directory, disk)

    def close(self) -> None:
        """Closes the index (no descriptor is held; what was not flushed is not durable)."""
        with self._lock:
            self._closed = True

    @property
    def failed(self) -> StorageFailed | None:
        return self._failed

    # -- internals -------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise LogClosed(f"timer index {self.directory} is closed")

    def _path(self, bucket: int) -> str:
        return os.path.join(self.directory, f"{bucket}{_SUFFIX}")


def _bucket_of_name(name: str) -> int | None:
    if not name.endswith(_SUFFIX):
        return None
    try:
        return int(name[: -len(_SUFFIX)])
    except ValueError:
        return None
