"""The segmented log: an ordered run of segments holding Raft entries (record batches).

Raft index and record offset, the two coordinates of an entry:

    last_index  == first_index + (entries retained) - 1      (first_index == 1 for a fresh log)
    base_offset(i+1) == base_offset(i) + record_count(i)      (offsets are dense; no-op and
                                                              config entries hold 0 records)
    next_offset == base_offset(last_index) + record_count(last_index)

`first_index` is logical: `truncate_prefix(i)` makes it exactly `i` and records that in
`log.meta` (written atomically), while files are deleted a whole segment at a time. The term of
the entry just before the retained prefix is kept there too, so `term_at(first_index - 1)`
answers the question Raft asks of a compacted log.

Durability: `durable_index` is the last index known to be fsynced. An append with `sync=True`
under the `always` policy is fsynced before `append` returns; with `sync=False` it is written
with one `pwritev` and becomes durable at the next `flush()` or `sync_logs(...)` (group commit:
one fsync per dirty file, however many logs and entries). `truncate_from` is fsynced at once.

A segment is sealed (the next one created) only after its `.log` is fsynced and its `.index`
written durably, so no crash tears a sealed segment; a new segment's name becomes durable with
the directory fsync that precedes any of its entries counting as durable.

Storage errors are fail-stop: once a write or an fsync has failed, every later write, flush and
truncation raises `StorageFailed` (a failed fsync is never retried), so `durable_index` never
passes what the failed operation covered.

Recovery on open (`storage.recovery`): the active (last) segment is scanned and every entry
verified; a torn tail is cut off and reported in `recovery`, while a bad entry with a valid
one after it raises `DamagedLog`. Sealed segments load their `.index`; one that is missing,
damaged or does not fit its `.log` is rebuilt from the `.log`. Every read verifies checksums,
so corrupt bytes are never served.

Locking: writers (append, flush, truncations, reset, close) hold `_write_lock` for their whole
span, fsyncs included; what readers see is published under `_lock`, which is never held across
an fsync. `first_index`, `last_index`, `last_term`, `next_offset`, `first_offset` and
`durable_index` are plain fields, read without any lock; the other reads take `_lock` briefly,
so an event loop reading a log never waits for its fsync.

Why one module of ~640 lines: every operation of the log (append, read, truncate either end,
reset, retention, recovery's install) moves the same segment list under the same two locks, and
the locking rule above holds only if they stay together; segments, their index and recovery live
in their own modules.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from storage.atomic import fsync_directory
from storage.config import FsyncMode, LogConfig
from storage.disk import Disk
from storage.entry import HEADER_SIZE, Entry, encode_header
from storage.errors import (
    BatchTooLarge,
    IndexOutOfRange,
    InvalidArgument,
    LogClosed,
    OffsetOutOfRange,
    StorageError,
    StorageFailed,
)
from storage.handles import DEFAULT_HANDLES, FileHandles
from storage.meta import META_NAME, RecoveryReport, write_meta
from storage.recovery import recover
from storage.segment import Segment

__all__ = ["SegmentedLog", "sync_logs"]

log = logging.getLogger("flotilla.storage")

_U32 = 2**32
_U64 = 2**64


class SegmentedLog:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        handles: FileHandles | None = None,
        create: bool = True,
        durable: bool = False,
        tag: str | None = None,
    ) -> None:
        """`durable`: the files are known to be durable, as the last process to write them
        closed this log (`close` flushes it): opening then skips the fsync that makes what a
        crashed process wrote durable before it is served (a node restarted after a clean stop
        saves one fsync per replica). `tag`: the owner's name for what the log belongs to
        (see `storage.meta`): a new log's header carries it, and a log tagged otherwise is
        refused (`ForeignLog`, nothing touched). `self.tag`: the header's, or for a header
        without one, `tag` (written with the next header); `self.header_tag`: the header's as
        opened (None: untagged, a log from before tags or a new header a crash tore)."""
        self.directory = os.fspath(directory)
        self.config = config or LogConfig()
        self._handles = handles or DEFAULT_HANDLES
        self._disk = self._handles.disk
        self._write_lock = threading.RLock()  # writers, across their I/O and fsyncs
        self._lock = threading.RLock()  # what readers see; never held across an fsync
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._start_index = 1
        self._start_term = 0
        self._start_offset = 0
        self._unsynced: list[Segment] = []
        self._directory_dirty = False
        self._creation_unsynced = False  # a new log's directory and header are not durable yet
        self._created_directories: list[str] = []  # made for a new log, outermost first
        self._last_fsync_s = time.monotonic()
        self._closed = False
        self._failed: StorageFailed | None = None
        # published for lock-free readers; updated under `_lock` with the segments
        self._last_index = 0
        self._last_term = 0
        self._next_offset = 0
        self._first_offset = 0
        self.recovery = RecoveryReport()
        self._trust_files = durable  # read by `_open` only
        self.tag: str | None = tag  # `_open` sets the header's
        self.header_tag: str | None = None
        self._open(create)
        self._durable_index = self._last_index

    # -- properties (lock-free) -------------------------------------------------------------
    @property
    def first_index(self) -> int:
        return self._start_index

    @property
    def last_index(self) -> int:
        return self._last_index

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def first_offset(self) -> int:
        return self._first_offset

    @property
    def durable_index(self) -> int:
        return self._durable_index

    @property
    def disk(self) -> Disk:
        """The disk this log's files live on (`storage.disk`): what its neighbours, such as
        the Raft log's sidecar files, should write through too."""
        return self._disk

    @property
    def failed(self) -> StorageFailed | None:
        """The write or fsync error that stopped this log, if one did."""
        return self._failed

    @property
    def needs_sync(self) -> bool:
        """True when something written is not yet known to be durable."""
        return self._durable_index < self._last_index or bool(self._unsynced)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def term_at(self, index: int) -> int:
        with self._lock:
            if index == self._start_index - 1:
                return self._start_term
            self._check_index(index)
            segment, row = self._locate(index)
            return segment.terms[row]

    def entry_meta(self, index: int) -> tuple[int, int, int]:
        """(term, base_offset, record_count) of entry `index`, from memory: no disk read."""
        with self._lock:
            self._check_index(index)
            segment, row = self._locate(index)
            return segment.terms[row], segment.base_offsets[row], segment.counts[row]

    def offset_after(self, index: int) -> int:
        """The offset following entry `index`'s records (`first_offset` for first_index - 1)."""
        with self._lock:
            if index == self._start_index - 1:
                return self._first_offset
            _, base_offset, count = self.entry_meta(index)
            return base_offset + count

    # -- writes -----------------------------------------------------------------------------
    def append(
        self,
        batch: bytes | memoryview,
        term: int,
        record_count: int,
        timestamp_ms: int,
        *,
        sync: bool = True,
    ) -> int:
        """Appends one batch as the next entry and returns its Raft index."""
        size = len(batch)
        if size > self.config.max_batch_bytes:
            raise BatchTooLarge(
                f"batch of {size} bytes exceeds max_batch_bytes={self.config.max_batch_bytes}"
            )
        if not 0 <= record_count < _U32:
            raise InvalidArgument(f"record_count={record_count} must be in 0..{_U32 - 1}")
        if not -(2**63) <= timestamp_ms < 2**63:
            raise InvalidArgument(f"timestamp_ms={timestamp_ms} does not fit a signed 64-bit int")
        with self._write_lock:
            if self._closed or self._failed is not None:
                self._check_writable()
            if not self._last_term <= term < _U64:
                raise InvalidArgument(
                    f"term {term} is below the log's last term {self._last_term}: terms never "
                    "decrease along a Raft log"
                )
            index = self._last_index + 1
            base_offset = self._next_offset
            header = encode_header(batch, index, term, base_offset, record_count, timestamp_ms)
            try:
                segment = self._segment_for_append(HEADER_SIZE + size)
                position = segment.write(header, batch)
            except OSError as error:
                raise self._fail(error, f"append of entry {index}") from error
            with self._lock:
                segment.record(
                    position,
                    position + HEADER_SIZE + size,
                    term,
                    base_offset,
                    record_count,
                    timestamp_ms,
                )
                self._last_index = index
                self._last_term = term
                self._next_offset = base_offset + record_count
            if not self._unsynced or self._unsynced[-1] is not segment:
                self._unsynced.append(segment)
            if sync:
                self._sync_by_policy()
            return index

    def flush(self) -> None:
        """Makes every appended entry durable: one fsync per dirty file."""
        with self._write_lock:
            self._check_writable()
            self._flush_locked()

    def truncate_from(self, index: int) -> None:
        """Removes entries `index..last_index` (a Raft conflict); durable on return."""
        with self._write_lock:
            self._check_writable()
            first, last = self._start_index, self._last_index
            if not first <= index <= last + 1:
                raise IndexOutOfRange(index, first, last + 1, "truncation point")
            if index == last + 1:
                return
            with self._lock:
                self._durable_index = min(self._durable_index, index - 1)
            try:
                while self._segments and self._segments[-1].base_index >= index:
                    self._drop_last_segment()
                if self._segments:
                    segment = self._segments[-1]
                    if segment.base_index < self._start_index == index:
                        # only entries below the logical start would remain: drop the file
                        # whole, keeping the invariant that every segment reaches first_index.
                        self._drop_last_segment()
                    else:
                        segment.truncate_rows(index - segment.base_index, self._lock)
                        self._publish()
                        if segment not in self._unsynced:
                            self._unsynced.append(segment)
                if self.config.fsync.mode is not FsyncMode.NEVER:
                    self._flush_locked()
            except OSError as error:
                raise self._fail(error, f"truncation from entry {index}") from error

    def truncate_prefix(self, index: int) -> None:
        """Removes entries below `index`; afterwards `first_index == index`."""
        with self._write_lock:
            self._check_writable()
            first, last = self._start_index, self._last_index
            if not first <= index <= last + 1:
                raise IndexOutOfRange(index, first, last + 1, "prefix truncation point")
            if index == first:
                return
            term = self.term_at(index - 1)
            if index <= last:
                with self._lock:
                    segment, row = self._locate(index)
                    offset = segment.base_offsets[row]
            else:
                offset = self._next_offset
            try:
                self._write_meta(index, term, offset, publish=False)
                doomed = []
                with self._lock:
                    self._start_index, self._start_term, self._start_offset = index, term, offset
                    while self._segments and self._segments[0].last_index < index:
                        doomed.append(self._segments.pop(0))
                        self._bases.pop(0)
                    self._publish()
                for segment in doomed:
                    self._forget_unsynced(segment)
                    segment.delete_files()
            except OSError as error:
                raise self._fail(error, f"prefix truncation to entry {index}") from error
            self._directory_dirty = True

    def reset(self, index: int, prev_term: int, next_offset: int) -> None:
        """Empties the log so that the next append gets `index`, with `term_at(index - 1) ==
        prev_term` and offsets continuing at `next_offset` (a follower reset to a leader's
        retained suffix)."""
        if index < 1 or prev_term < 0 or next_offset < 0:
            raise InvalidArgument(
                f"reset(index={index}, prev_term={prev_term}, next_offset={next_offset}): "
                "index must be >= 1, prev_term and next_offset >= 0"
            )
        with self._write_lock:
            self._check_writable()
            try:
                while self._segments:
                    self._drop_last_segment()
                fsync_directory(self.directory, self._disk)
                self._write_meta(index, prev_term, next_offset)
            except OSError as error:
                raise self._fail(error, f"reset to entry {index}") from error
            with self._lock:
                self._durable_index = index - 1

    def apply_retention(self, now_ms: int, keep_from: int | None = None) -> int:
        """Removes whole sealed segments beyond `retention_bytes` / older than `retention_ms`,
        never at or above `keep_from` (e.g. Raft's commit index + 1). Returns entries removed."""
        with self._write_lock:
            cut = self.retention_cut(now_ms, self.config.retention_bytes, self.config.retention_ms)
            if keep_from is not None:
                cut = min(cut, keep_from)
            if cut <= self._start_index:
                return 0
            removed = cut - self._start_index
            self.truncate_prefix(cut)
            return removed

    def retention_cut(
        self, now_ms: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        """The first index that retention keeps: whole sealed segments go while the log is
        larger than `retention_bytes` without them, or while their newest entry is older than
        `retention_ms` (None: no limit); the active segment always stays. Removes nothing (a
        Raft log compacts itself to this point, keeping its configuration sidecar)."""
        with self._lock:
            self._check_open()
            cut = self._start_index
            if (retention_bytes is None and retention_ms is None) or len(self._segments) < 2:
                return cut
            total = sum(segment.size for segment in self._segments)
            for segment in self._segments[:-1]:
                too_big = retention_bytes is not None and total - segment.size >= retention_bytes
                too_old = (
                    retention_ms is not None and segment.newest_timestamp_ms < now_ms - retention_ms
                )
                if not (too_big or too_old):
                    break
                cut = segment.last_index + 1
                total -= segment.size
            return cut

    def cut_keeping(self, index: int) -> int:
        """The first index a compaction may cut to while keeping entry `index` and every
        later one: whole sealed segments wholly below it go; the active segment always stays.
        Removes nothing."""
        with self._lock:
            self._check_open()
            cut = self._start_index
            for segment in self._segments[:-1]:
                if segment.last_index >= index:
                    break
                cut = segment.last_index + 1
            return cut

    def close(self) -> None:
        """Flushes (unless the policy is `never`) and closes. A log stopped by a storage error
        closes its files without fsync: the error was raised already."""
        with self._write_lock:
            if self._closed:
                return
            try:
                if self._failed is None and self.config.fsync.mode is not FsyncMode.NEVER:
                    try:
                        self._flush_locked()
                    except OSError as error:
                        raise self._fail(error, "flush on close") from error
            finally:
                self._closed = True
                for segment in self._segments:
                    if self._failed is None:
                        self._handles.close(segment.log_path)
                    else:
                        self._handles.discard(segment.log_path)

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ------------------------------------------------------------------------------
    def read(self, index: int) -> Entry:
        with self._lock:
            self._check_open()
            self._check_index(index)
            segment, row = self._locate(index)
            return segment.read_rows(row, row + 1)[0]

    def read_from(self, index: int, max_bytes: int) -> Iterator[Entry]:
        """Entries from `index` on, in order, across segments, up to `max_bytes` of stored
        bytes (48-byte header + batch each); always at least one entry if `index <= last_index`.
        `index == last_index + 1` yields nothing."""
        with self._lock:
            self._check_open()
            if index != self._last_index + 1:
                self._check_index(index)
        return self._iterate(index, max_bytes)

    def find_offset(self, offset: int) -> int:
        """The Raft index of the entry holding record `offset`."""
        with self._lock:
            self._check_open()
            first_offset, next_offset = self._first_offset, self._next_offset
            if not first_offset <= offset < next_offset:
                raise OffsetOutOfRange(offset, first_offset, next_offset)
            # a segment being rolled in is visible (empty) before its first entry is written:
            # it holds no offset, and `offset < next_offset` lies in an earlier one
            segments = self._segments
            end = len(segments) - 1 if segments[-1].entry_count == 0 else len(segments)
            position = bisect_right(segments, offset, 0, end, key=_first_offset) - 1
            segment = segments[position]
            return segment.base_index + segment.row_for_offset(offset)

    # -- internals ----------------------------------------------------------------------------
    def _iterate(self, index: int, max_bytes: int) -> Iterator[Entry]:
        remaining = max_bytes
        first = True
        while True:
            with self._lock:
                self._check_open()
                if index > self._last_index:
                    return
                if index < self._start_index:
                    raise IndexOutOfRange(index, self._start_index, self._last_index)
                segment, row = self._locate(index)
                start = segment.positions[row]
                limit = start + max(remaining, 0)
                if segment.size <= limit:
                    end_row = segment.entry_count
                else:
                    end_row = bisect_right(segment.positions, limit) - 1
                if end_row <= row:
                    if not first:
                        return
                    end_row = row + 1
                entries = segment.read_rows(row, end_row)
                remaining -= segment.end_of(end_row - 1) - start
            yield from entries
            index += len(entries)
            first = False
            if remaining <= 0:
                return

    def _segment_for_append(self, entry_bytes: int) -> Segment:
        if self._segments:
            active = self._segments[-1]
            if active.size == 0 or active.size + entry_bytes <= self.config.segment_bytes:
                return active
            self._seal(active)
        segment = Segment(self.directory, self._last_index + 1, self._handles)
        with self._lock:
            self._segments.append(segment)
            self._bases.append(segment.base_index)
        self._directory_dirty = True
        return segment

    def _seal(self, segment: Segment) -> None:
        """Before a new segment exists: the old one's `.log` is fsynced, then its `.index`
        written durably (renamed into place; the directory fsync before the new segment's
        entries count as durable makes the name durable). So a crash never tears a sealed
        segment, and never leaves an index describing entries its `.log` lost."""
        segment.fsync()
        segment.write_index()

    def _sync_by_policy(self) -> None:
        policy = self.config.fsync
        if policy.mode is FsyncMode.ALWAYS:
            self._flush_locked()
        elif policy.mode is FsyncMode.INTERVAL:
            due = (time.monotonic() - self._last_fsync_s) * 1000 >= policy.interval_ms
            if due:
                self._flush_locked()

    def _flush_locked(self) -> None:
        """Under `_write_lock` only: the fsyncs run while readers go on; `durable_index` then
        moves to what they covered (no writer could append meanwhile)."""
        target = self._last_index
        try:
            for segment in self._unsynced:
                segment.fsync()
            self._unsynced.clear()
            if self._creation_unsynced and self._segments:
                self._make_creation_durable()
            if self._directory_dirty:
                fsync_directory(self.directory, self._disk)
                self._directory_dirty = False
        except OSError as error:
            raise self._fail(error, "flush") from error
        with self._lock:
            self._durable_index = target
        self._last_fsync_s = time.monotonic()

    def _fail(self, error: OSError, what: str) -> StorageFailed:
        """Stops the log: this and every later write, flush or truncation raises the error."""
        if self._failed is None:
            self._failed = StorageFailed(
                f"log {self.directory}: {what} failed ({error}); the log takes no more writes "
                f"and nothing past entry {self._durable_index} is known to be durable",
                error.errno,
            )
            # an event line (cluster.logs renders `event` and `fields`); the node's fail-stop
            # logs the CRITICAL line
            log.error(
                "%s",
                self._failed,
                extra={
                    "event": "storage_error",
                    "fields": {
                        "log": self.directory,
                        "doing": what,
                        "error": str(error),
                        "errno": error.errno,
                        "durable_index": self._durable_index,
                    },
                },
            )
        return self._failed

    def _drop_last_segment(self) -> None:
        with self._lock:
            segment = self._segments.pop()
            self._bases.pop()
            self._publish()
        self._forget_unsynced(segment)
        segment.delete_files()
        self._directory_dirty = True

    def _forget_unsynced(self, segment: Segment) -> None:
        if segment in self._unsynced:
            self._unsynced.remove(segment)

    def _locate(self, index: int) -> tuple[Segment, int]:
        segment = self._segments[bisect_right(self._bases, index) - 1]
        return segment, index - segment.base_index

    def _check_index(self, index: int) -> None:
        if not self._start_index <= index <= self._last_index:
            raise IndexOutOfRange(index, self._start_index, self._last_index)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failed is not None:
            raise self._failed

    def _publish(self) -> None:
        """Under `_lock`: the lock-free fields, from the segments and the log start."""
        if self._segments:
            last = self._segments[-1]
            self._last_index = last.last_index
            self._last_term = last.terms[-1]
            self._next_offset = last.next_offset
            first, row = self._locate(self._start_index)
            self._first_offset = first.base_offsets[row]
        else:
            self._last_index = self._start_index - 1
            self._last_term = self._start_term
            self._next_offset = self._first_offset = self._start_offset

    def _make_creation_durable(self) -> None:
        """The first time anything in a new log is to be durable: its directory's entry in the
        parent (and that of every directory made for it) and its header's entry in the
        directory must be, too, and a tagged header's bytes (a durable entry is never without
        its tag)."""
        if self.tag is not None:
            fd = self._disk.open(os.path.join(self.directory, META_NAME), os.O_RDONLY)
            try:
                self._disk.fsync(fd)
            finally:
                self._disk.close(fd)
        for directory in self._created_directories or [os.path.abspath(self.directory)]:
            fsync_directory(os.path.dirname(directory), self._disk)
        self._directory_dirty = True
        self._creation_unsynced = False

    def _write_meta(self, index: int, term: int, offset: int, *, publish: bool = True) -> None:
        if self._creation_unsynced:
            self._make_creation_durable()
        write_meta(self.directory, index, term, offset, self._disk, self.tag)
        if publish:
            with self._lock:
                self._start_index, self._start_term, self._start_offset = index, term, offset
                self._publish()

    # -- opening and recovery -----------------------------------------------------------------
    def _open(self, create: bool) -> None:
        tag = self.tag
        try:
            recovered = recover(
                self.directory, self.config, self._handles, create, self._trust_files, tag
            )
        except StorageError:
            raise
        except OSError as error:
            raise StorageFailed(
                f"opening log {self.directory} failed: {error}", error.errno
            ) from error
        with self._lock:
            self._segments = list(recovered.segments)
            self._bases = [segment.base_index for segment in self._segments]
            self._start_index, self._start_term, self._start_offset = recovered.start
            self._publish()
        # kept by every later header; a log whose header has none (written before tags, or a
        # new header a crash tore) takes the one it was opened with
        self.header_tag = recovered.tag
        self.tag = recovered.tag if recovered.tag is not None else tag
        if recovered.created_directories is not None:
            self._created_directories = list(recovered.created_directories)
            self._creation_unsynced = True
        self.recovery = report = recovered.report
        if not report.clean:
            log.warning("recovered log %s: %s", self.directory, report)


def _first_offset(segment: Segment) -> int:
    return segment.first_offset


SYNC_THREADS = 8
_sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
_sync_pool_lock = threading.Lock()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _sync_pool
    with _sync_pool_lock:
        if _sync_pool is None:
            _sync_pool = concurrent.futures.ThreadPoolExecutor(SYNC_THREADS, "flotilla-fsync")
        return _sync_pool


def sync_logs(logs: Iterable[SegmentedLog]) -> int:
    """Group commit: makes every given log durable with one fsync per dirty file, the fsyncs of
    different logs running in parallel on `SYNC_THREADS` threads (concurrent fsyncs share the
    file system's journal commits: on ext4 eight cost little more than one). Returns only when
    every log is durable, or raises the first error met (after every fsync has finished).

    Returns how many logs had something to sync."""
    dirty = [each for each in logs if each.needs_sync]
    if len(dirty) <= 1:
        for each in dirty:
            each.flush()
        return len(dirty)
    futures = [_pool().submit(each.flush) for each in dirty]
    concurrent.futures.wait(futures)
    for future in futures:
        future.result()  # raises the first failure
    return len(dirty)
