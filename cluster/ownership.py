"""What one node process owns alone: its data directory and its listening addresses.

Two processes on one data directory would both append at the same offsets and overwrite each
other's files, losing acknowledged records; two servers sharing a port (SO_REUSEPORT, gRPC's
default) would split the clients between two different nodes. So a node takes an exclusive
`flock` on `<data_dir>/node.lock` before it opens anything under the directory, and holds it for
the life of the process (the kernel releases it when the process dies, however it dies: no stale
lock to clean up after a crash); the lock file holds the holder's pid, for the error message of
the process that is refused. Every listening socket is bound without port reuse, and a failure to
bind becomes `AddressInUse` naming the address.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from cluster.errors import ClusterError

__all__ = ["LOCK_FILE", "AddressInUse", "DataDirLock", "DataDirLocked", "StartRefused"]

LOCK_FILE = "node.lock"


class StartRefused(ClusterError, OSError):
    """The node cannot start: something it must own alone is taken. The message says what."""


class DataDirLocked(StartRefused):
    """Another process holds the data directory's lock."""


class AddressInUse(StartRefused):
    """A listening address (gRPC, control plane or metrics) is already bound."""

    def __init__(self, role: str, address: str, detail: str = "") -> None:
        more = f" ({detail})" if detail else ""
        super().__init__(
            f"the {role} address {address} is in use by another process{more}: "
            f"stop that process or choose another address"
        )
        self.address = address


class DataDirLock:
    """An exclusive, non-blocking `flock` on `<data_dir>/node.lock`, held until `release` or
    the end of the process."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, LOCK_FILE)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DataDirLocked(
                f"data directory {data_dir} is in use: its lock {self.path} is held by "
                f"{_holder(self.path)}; one data directory serves one node process"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor releases the flock


def _holder(path: str) -> str:
    """The holder as its lock file names it (it writes its pid right after locking)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            text = handle.read().strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "another process (pid not yet written)"
