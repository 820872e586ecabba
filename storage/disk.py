"""The I/O seam: every file operation of `storage` goes through a `Disk`.

`OsDisk` is the real one (thin wrappers over `os`, plus the fault hook of `storage.faults`);
`storage.simdisk.SimDisk` is an in-memory disk for tests and simulations that loses or tears
unsynced writes on a simulated crash, flips bits and fails writes and fsyncs on demand. The
storage code is the same over both, so a simulation exercises the real recovery paths.

The operations are the POSIX ones the storage code needs, with their POSIX meaning: positional
reads and writes on descriptors, `fsync` of a file or of a directory (opened with
`O_DIRECTORY`), and the directory operations (`replace` is `rename(2)`). Nothing is durable
until fsynced: a file's data by an fsync of the file, a name in a directory (created, renamed,
removed) by an fsync of the directory.

Cost: one method call per operation, plus one `is None` test on writes and fsyncs.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from storage.faults import FaultControl, from_environment

__all__ = ["OS_DISK", "Buffer", "Disk", "OsDisk", "arm_faults", "disarm_faults"]

Buffer = bytes | bytearray | memoryview


class Disk:
    """The operations `storage` performs on files and directories (see the module docstring).
    Errors are `OSError`s with the errno the OS would give."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        raise NotImplementedError

    def close(self, fd: int) -> None:
        raise NotImplementedError

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        raise NotImplementedError

    def write(self, fd: int, data: Buffer) -> int:
        raise NotImplementedError

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        raise NotImplementedError

    def fsync(self, fd: int) -> None:
        raise NotImplementedError

    def ftruncate(self, fd: int, length: int) -> None:
        raise NotImplementedError

    def size(self, fd: int) -> int:
        raise NotImplementedError

    def replace(self, source: str, target: str) -> None:
        raise NotImplementedError

    def unlink(self, path: str) -> None:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def mkdir(self, path: str) -> None:
        raise NotImplementedError

    def kind(self, path: str) -> str | None:
        """ "file", "dir", or None when nothing is at `path`."""
        raise NotImplementedError

    # -- helpers built on the operations ------------------------------------------------------
    def read_file(self, path: str) -> bytes | None:
        """The whole content of `path`, or None if it does not exist."""
        try:
            fd = self.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return self.pread(fd, self.size(fd), 0)
        finally:
            self.close(fd)

    def write_all(self, fd: int, data: Buffer) -> None:
        view = memoryview(data)
        while view:
            view = view[self.write(fd, view) :]

    def makedirs(self, path: str) -> list[str]:
        """Creates `path` and any missing parents; returns the directories created, outermost
        first (their entries in their parents are not durable yet)."""
        missing: list[str] = []
        current = os.path.abspath(path)
        while self.kind(current) is None:
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        missing.reverse()
        for directory in missing:
            try:
                self.mkdir(directory)
            except FileExistsError:
                pass
        return missing


class OsDisk(Disk):
    """The real file system. `faults` is the hook of `storage.faults` (None: disarmed)."""

    def __init__(self, faults: FaultControl | None = None) -> None:
        self.faults = faults

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        if self.faults is not None:
            self.faults.check("write")
        return os.pwritev(fd, buffers, offset)

    def write(self, fd: int, data: Buffer) -> int:
        if self.faults is not None:
            self.faults.check("write")
        return os.write(fd, data)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return os.pread(fd, length, offset)

    def fsync(self, fd: int) -> None:
        if self.faults is not None:
            self.faults.check("fsync")
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def kind(self, path: str) -> str | None:
        try:
            mode = os.stat(path).st_mode  # one stat (thousands of logs open at a start)
        except (OSError, ValueError):
            return None
        return "dir" if stat.S_ISDIR(mode) else "file"


OS_DISK = OsDisk(from_environment())


def arm_faults(path: str) -> None:
    """Arms the fault hook (`storage.faults`) in this process on the real disk, `OS_DISK`, with
    the control file at `path`. For tests only."""
    OS_DISK.faults = FaultControl(path)


def disarm_faults() -> None:
    OS_DISK.faults = None
