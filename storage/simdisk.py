"""`SimDisk`: an in-memory disk that fails the way real ones do, under the real storage code.

Each file keeps two images: what reads see (the page cache) and what survived its last
successful fsync, plus the writes and truncations made since (in order). Each directory keeps its
names likewise. On `crash()` every file and directory keeps its durable image plus a random
prefix of its later operations, the last one of which may be torn at any byte (cut short, or
the rest zeroed, or junk where it overwrote bytes); so unsynced data may be lost or torn, and a name created,
renamed or removed since its directory's last fsync may come back or vanish. Every descriptor
is invalid after a crash: the process died.

A failed fsync is modelled as Linux does it (fsyncgate): the writes it covered are no longer
pending, so a later, successful fsync does not make them durable, while reads still see them
until the crash. Faults: `fail(operation, errno)` fails the next write or fsync (or every one,
with `rate`); `flip(path)` flips a bit of a file at rest.

Everything random comes from the `random.Random` given, so a seed replays a run exactly.
Paths are absolute (relative ones are taken from `/`). Not thread-safe beyond the GIL: the
storage code's locks serialise what shares a file.
"""

from __future__ import annotations

import errno as errnos
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage.disk import Buffer, Disk

__all__ = ["SimDisk"]


def _error(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), *((path,) if path else ()))


class _File:
    __slots__ = ("data", "durable", "path", "pending")

    def __init__(self, path: str) -> None:
        self.path = path
        self.data = bytearray()
        self.durable = bytearray()
        self.pending: list[tuple[int, bytes | None]] = []  # (offset, bytes) or (size, None)


class _Dir:
    __slots__ = ("durable", "entries", "path", "pending")

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: dict[str, _File | _Dir] = {}
        self.durable: dict[str, _File | _Dir] = {}
        # steps since the last fsync, each a set of name changes a crash keeps whole or not
        # at all: (name, node), or (name, None) for a name removed
        self.pending: list[tuple[tuple[str, _File | _Dir | None], ...]] = []


def _apply(image: bytearray, operation: tuple[int, bytes | None]) -> None:
    where, data = operation
    if data is None:
        del image[where:]
        image.extend(bytes(max(0, where - len(image))))
        return
    if len(image) < where:
        image.extend(bytes(where - len(image)))
    image[where : where + len(data)] = data


@dataclass
class _Open:
    node: _File | _Dir
    append: bool
    position: int = 0


@dataclass
class _Faults:
    once: dict[str, list[int]] = field(default_factory=dict)
    rate: float = 0.0
    codes: tuple[int, ...] = (errnos.EIO, errnos.ENOSPC)
    operations: tuple[str, ...] = ("write", "fsync")


class SimDisk(Disk):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.root = _Dir("/")
        self._nodes: list[_File | _Dir] = [self.root]
        self._fds: dict[int, _Open] = {}
        self._next_fd = 3
        self.faults = _Faults()
        self.injected: list[tuple[str, int]] = []  # (operation, errno) of every fault raised

    # -- faults -------------------------------------------------------------------------------
    def fail(self, operation: str, code: int = errnos.EIO, times: int = 1) -> None:
        """The next `times` operations `operation` ("write" or "fsync") raise `code`."""
        self.faults.once.setdefault(operation, []).extend([code] * times)

    def set_error_rate(self, rate: float, operations: tuple[str, ...] = ("write", "fsync")) -> None:
        """From now on each of `operations` ("write", "fsync") fails (EIO or ENOSPC) with
        probability `rate`."""
        self.faults.rate = rate
        self.faults.operations = operations

    def _maybe_fail(self, operation: str) -> None:
        queued = self.faults.once.get(operation)
        code = queued.pop(0) if queued else None
        faults = self.faults
        if (
            code is None
            and faults.rate
            and operation in faults.operations
            and self.rng.random() < faults.rate
        ):
            code = self.rng.choice(self.faults.codes)
        if code is not None:
            self.injected.append((operation, code))
            raise _error(code)

    def flip(self, path: str, position: int | None = None, bit: int | None = None) -> int:
        """Flips one bit of `path`'s content (on disk and in the cache); returns its byte."""
        node = self._lookup(path)
        if not isinstance(node, _File) or not node.data:
            raise _error(errnos.EINVAL, path)
        where = self.rng.randrange(len(node.data)) if position is None else position
        mask = 1 << (self.rng.randrange(8) if bit is None else bit)
        node.data[where] ^= mask
        if where < len(node.durable):
            node.durable[where] ^= mask
        return where

    # -- crashes ------------------------------------------------------------------------------
    def crash(self) -> None:
        """Power loss: see the module docstring. Every open descriptor becomes invalid."""
        self._fds.clear()
        for node in self._nodes:
            if isinstance(node, _Dir):
                kept = self.rng.randint(0, len(node.pending))
                entries = dict(node.durable)
                for step in node.pending[:kept]:
                    for name, target in step:
                        if target is None:
                            entries.pop(name, None)
                        else:
                            entries[name] = target
                node.entries, node.durable, node.pending = entries, dict(entries), []
            else:
                image = bytearray(node.durable)
                kept = self.rng.randint(0, len(node.pending))
                for operation in node.pending[:kept]:
                    _apply(image, operation)
                if kept < len(node.pending) and self.rng.random() < 0.5:
                    self._tear(image, node.pending[kept])
                node.data, node.durable, node.pending = image, bytearray(image), []

    def _tear(self, image: bytearray, operation: tuple[int, bytes | None]) -> None:
        where, data = operation
        if data is None or not data:
            return
        cut = self.rng.randrange(len(data))
        style = self.rng.randrange(3)
        if style == 0:
            rest = b""
        else:
            # the rest reads as zeros where the file had no bytes (a file system never shows
            # stale blocks there); where it overwrote bytes, as zeros or junk (a torn sector)
            rest = bytes(len(data) - cut)
            old = max(0, min(len(image), where + len(data)) - (where + cut))
            if style == 2 and old:
                rest = self.rng.randbytes(old) + rest[old:]
        _apply(image, (where, data[:cut] + rest))

    # -- paths --------------------------------------------------------------------------------
    def _split(self, path: str) -> tuple[_Dir, str]:
        full = os.path.normpath(os.path.join("/", os.fspath(path)))
        parent_path, name = os.path.split(full)
        parent = self._lookup(parent_path)
        if not isinstance(parent, _Dir):
            raise _error(errnos.ENOENT if parent is None else errnos.ENOTDIR, path)
        return parent, name

    def _lookup(self, path: str) -> _File | _Dir | None:
        node: _File | _Dir | None = self.root
        for part in os.path.normpath(os.path.join("/", os.fspath(path))).split("/"):
            if not part:
                continue
            if not isinstance(node, _Dir):
                return None
            node = node.entries.get(part)
        return node

    def _name(self, parent: _Dir, name: str, node: _File | _Dir | None) -> None:
        if node is None:
            parent.entries.pop(name, None)
        else:
            parent.entries[name] = node
            node.path = os.path.join(parent.path, name)
        parent.pending.append(((name, node),))

    def _open_file(self, fd: int) -> _Open:
        handle = self._fds.get(fd)
        if handle is None:
            raise _error(errnos.EBADF)
        return handle

    def _file(self, fd: int) -> _File:
        node = self._open_file(fd).node
        if not isinstance(node, _File):
            raise _error(errnos.EISDIR)
        return node

    # -- Disk ---------------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        parent, name = self._split(path)
        node = parent.entries.get(name) if name else parent
        if flags & os.O_DIRECTORY:
            if not isinstance(node, _Dir):
                raise _error(errnos.ENOENT if node is None else errnos.ENOTDIR, path)
        elif node is None:
            if not flags & os.O_CREAT:
                raise _error(errnos.ENOENT, path)
            node = _File(os.path.join(parent.path, name))
            self._nodes.append(node)
            self._name(parent, name, node)
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise _error(errnos.EEXIST, path)
        elif isinstance(node, _Dir):
            raise _error(errnos.EISDIR, path)
        elif flags & os.O_TRUNC and node.data:
            node.data.clear()
            node.pending.append((0, None))
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = _Open(node, bool(flags & os.O_APPEND))
        return fd

    def close(self, fd: int) -> None:
        self._open_file(fd)
        del self._fds[fd]

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        node = self._file(fd)
        self._maybe_fail("write")
        data = b"".join(bytes(buffer) for buffer in buffers)
        operation = (offset, data)
        _apply(node.data, operation)
        node.pending.append(operation)
        return len(data)

    def write(self, fd: int, data: Buffer) -> int:
        handle = self._open_file(fd)
        node = self._file(fd)
        self._maybe_fail("write")
        offset = len(node.data) if handle.append else handle.position
        operation = (offset, bytes(data))
        _apply(node.data, operation)
        node.pending.append(operation)
        handle.position = offset + len(operation[1] or b"")
        return len(data)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return bytes(self._file(fd).data[offset : offset + length])

    def fsync(self, fd: int) -> None:
        node = self._open_file(fd).node
        try:
            self._maybe_fail("fsync")
        except OSError:
            node.pending = []  # fsyncgate: those writes are no longer pending, nor durable
            raise
        if isinstance(node, _Dir):
            node.durable = dict(node.entries)
        else:
            for operation in node.pending:
                _apply(node.durable, operation)
        node.pending = []

    def ftruncate(self, fd: int, length: int) -> None:
        node = self._file(fd)
        operation = (length, None)
        _apply(node.data, operation)
        node.pending.append(operation)

    def size(self, fd: int) -> int:
        return len(self._file(fd).data)

    def replace(self, source: str, target: str) -> None:
        source_dir, source_name = self._split(source)
        target_dir, target_name = self._split(target)
        node = source_dir.entries.get(source_name)
        if node is None:
            raise _error(errnos.ENOENT, source)
        if source_dir is target_dir:
            # one step of the directory: both names change together, or neither
            source_dir.entries.pop(source_name)
            source_dir.entries[target_name] = node
            node.path = os.path.join(target_dir.path, target_name)
            source_dir.pending.append(((source_name, None), (target_name, node)))
        else:
            self._name(source_dir, source_name, None)
            self._name(target_dir, target_name, node)

    def unlink(self, path: str) -> None:
        parent, name = self._split(path)
        node = parent.entries.get(name)
        if node is None:
            raise _error(errnos.ENOENT, path)
        if isinstance(node, _Dir):
            raise _error(errnos.EISDIR, path)
        self._name(parent, name, None)

    def listdir(self, path: str) -> list[str]:
        node = self._lookup(path)
        if not isinstance(node, _Dir):
            raise _error(errnos.ENOENT if node is None else errnos.ENOTDIR, path)
        return list(node.entries)

    def mkdir(self, path: str) -> None:
        parent, name = self._split(path)
        if name in parent.entries:
            raise _error(errnos.EEXIST, path)
        node = _Dir(os.path.join(parent.path, name))
        self._nodes.append(node)
        self._name(parent, name, node)

    def kind(self, path: str) -> str | None:
        node = self._lookup(path)
        if node is None:
            return None
        return "dir" if isinstance(node, _Dir) else "file"
