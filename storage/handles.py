"""A bounded, process-wide cache of open file descriptors.

A node may host ten thousand partitions while the process may hold at most ~20,000 open files,
so segment files are not each held open. Users `pin` a descriptor for the span of one operation;
the least recently used unpinned descriptors are closed once more than `max_open` are open.
A descriptor written since its last fsync is fsynced before it is closed, so eviction never
weakens durability (and Linux reports write-back errors to the fsync that follows).

All descriptors are opened O_RDWR and used only with positional I/O (`pread`/`pwritev`), so one
descriptor can serve readers and the writer at once. Thread-safe.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DEFAULT_HANDLES", "FileHandles"]


class _Handle:
    __slots__ = ("dirty", "fd", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.dirty = False


class FileHandles:
    def __init__(self, max_open: int = 1024) -> None:
        if max_open < 1:
            raise ValueError(f"max_open={max_open} must be at least 1")
        self.max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[str, _Handle] = OrderedDict()

    @property
    def open_count(self) -> int:
        return len(self._open)

    @contextmanager
    def pin(self, path: str, *, write: bool = False) -> Iterator[int]:
        """Yields an open descriptor for `path` (created if missing), held open meanwhile."""
        with self._lock:
            handle = self._open.get(path)
            if handle is None:
                handle = _Handle(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
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

    def fsync(self, path: str) -> None:
        """Makes everything written to `path` durable (a no-op if nothing is pending)."""
        with self._lock:
            handle = self._open.get(path)
            if handle is None or not handle.dirty:
                return
            handle.pins += 1
            handle.dirty = False
        try:
            os.fsync(handle.fd)
        except BaseException:
            with self._lock:
                handle.dirty = True
            raise
        finally:
            with self._lock:
                handle.pins -= 1

    def close(self, path: str) -> None:
        """Closes `path`'s descriptor (fsyncing pending writes); used before unlink or rename."""
        with self._lock:
            handle = self._open.pop(path, None)
        if handle is not None:
            try:
                if handle.dirty:
                    os.fsync(handle.fd)
            finally:
                os.close(handle.fd)

    def discard(self, path: str) -> None:
        """Closes `path`'s descriptor without fsync; for a file about to be deleted."""
        with self._lock:
            handle = self._open.pop(path, None)
        if handle is not None:
            os.close(handle.fd)

    def _evict_locked(self) -> None:
        if len(self._open) <= self.max_open:
            return
        for path in list(self._open):
            if len(self._open) <= self.max_open:
                break
            handle = self._open[path]
            if handle.pins:
                continue
            del self._open[path]
            try:
                if handle.dirty:
                    os.fsync(handle.fd)
            finally:
                os.close(handle.fd)


DEFAULT_HANDLES = FileHandles(max_open=int(os.environ.get("FLOTILLA_MAX_OPEN_FILES", "4096")))
