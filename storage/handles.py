"""A bounded, process-wide cache of open file descriptors.

A node may host ten thousand partitions while the process may hold at most ~20,000 open files,
so segment files are not each held open. Users `pin` a descriptor for the span of one operation;
the least recently used unpinned descriptors are closed once more than `max_open` are open,
clean ones first. A descriptor written since its last fsync is fsynced before it is closed, so
eviction never weakens durability (and Linux reports write-back errors to the fsync that
follows).

A failed fsync (or write) is never forgotten and never retried: after one, Linux may have
marked the dirty pages clean, so a second fsync would succeed without writing them. The path is
recorded as failed; every later `fsync` of it and every `pin(..., write=True)` raises
`StorageFailed`, so no flush can report as durable what the failed fsync lost. Only `discard`
(the file is being deleted) clears the record.

All descriptors are opened O_RDWR and used only with positional I/O (`pread`/`pwritev`), so one
descriptor can serve readers and the writer at once. Thread-safe.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from storage.disk import OS_DISK, Disk
from storage.errors import StorageFailed

__all__ = ["DEFAULT_HANDLES", "FileHandles"]

log = logging.getLogger("flotilla.storage")


class _Handle:
    __slots__ = ("dirty", "fd", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.dirty = False


class FileHandles:
    def __init__(self, max_open: int = 1024, disk: Disk = OS_DISK) -> None:
        if max_open < 1:
            raise ValueError(f"max_open={max_open} must be at least 1")
        self.max_open = max_open
        self.disk = disk
        self._lock = threading.Lock()
        self._open: OrderedDict[str, _Handle] = OrderedDict()
        self._failed: dict[str, OSError] = {}

    @property
    def open_count(self) -> int:
        return len(self._open)

    def failure(self, path: str) -> OSError | None:
        """The write or fsync error recorded for `path`, if one failed."""
        return self._failed.get(path)

    @contextmanager
    def pin(self, path: str, *, write: bool = False) -> Iterator[int]:
        """Yields an open descriptor for `path` (created if missing), held open meanwhile."""
        with self._lock:
            if write and path in self._failed:
                raise _failed(path, self._failed[path])
            handle = self._open.get(path)
            if handle is None:
                handle = _Handle(self.disk.open(path, os.O_RDWR | os.O_CREAT))
                handle.pins += 1
                self._open[path] = handle
                self._evict_locked()
            else:
                self._open.move_to_end(path)
                handle.pins += 1
            if write:
                handle.dirty = True
        try:
            yield handle.fd
        finally:
            with self._lock:
                handle.pins -= 1

    def fail(self, path: str, error: OSError) -> None:
        """Records that a write to `path` failed: the file refuses writes and fsyncs from now on."""
        with self._lock:
            self._failed.setdefault(path, error)

    def fsync(self, path: str) -> None:
        """Makes everything written to `path` durable (a no-op if nothing is pending)."""
        with self._lock:
            if path in self._failed:
                raise _failed(path, self._failed[path])
            handle = self._open.get(path)
            if handle is None or not handle.dirty:
                return
            handle.pins += 1
            handle.dirty = False
        try:
            self.disk.fsync(handle.fd)
        except OSError as error:
            self.fail(path, error)  # never retried: the next fsync raises too
            raise _failed(path, error) from error
        finally:
            with self._lock:
                handle.pins -= 1

    def close(self, path: str) -> None:
        """Closes `path`'s descriptor (fsyncing pending writes); used before unlink or rename."""
        with self._lock:
            handle = self._open.pop(path, None)
            failure = self._failed.get(path)
        if handle is None:
            return
        try:
            if failure is not None:
                raise _failed(path, failure)
            if handle.dirty:
                try:
                    self.disk.fsync(handle.fd)
                except OSError as error:
                    self.fail(path, error)
                    raise _failed(path, error) from error
        finally:
            self.disk.close(handle.fd)

    def discard(self, path: str) -> None:
        """Closes `path`'s descriptor without fsync; for a file about to be deleted."""
        with self._lock:
            handle = self._open.pop(path, None)
            self._failed.pop(path, None)
        if handle is not None:
            self.disk.close(handle.fd)

    def _evict_locked(self) -> None:
        """Closes the least recently used unpinned descriptors (clean ones first) until at most
        `max_open` are open. It looks only as far into the LRU order as it must: one pin over
        the cap costs one close, not a walk of every open file (a node with more replicas than
        `max_open` pins past the cap on every write of a file not open)."""
        excess = len(self._open) - self.max_open
        for only_clean in (True, False):
            if excess <= 0:
                return
            victims: list[tuple[str, _Handle]] = []
            for path, handle in self._open.items():
                if handle.pins or (only_clean and handle.dirty):
                    continue
                victims.append((path, handle))
                if len(victims) == excess:
                    break
            for path, handle in victims:
                del self._open[path]
                try:
                    if handle.dirty:
                        self.disk.fsync(handle.fd)
                except OSError as error:
                    # not the pinning caller's file: recorded, so the owner's next flush fails
                    self._failed.setdefault(path, error)
                    log.error("fsync of %s on closing it failed: %s", path, error)
                finally:
                    self.disk.close(handle.fd)
            excess -= len(victims)


def _failed(path: str, error: OSError) -> StorageFailed:
    return StorageFailed(
        f"{path}: a write or fsync failed ({error}); nothing written to it since its last "
        "successful fsync may be durable, and it accepts no more writes (fail-stop)",
        error.errno,
    )


DEFAULT_HANDLES = FileHandles(max_open=int(os.environ.get("FLOTILLA_MAX_OPEN_FILES", "4096")))
