"""One node's Raft hard states, for all its groups, in one append-only journal.

A per-group state file costs two or three fsyncs per save (temp file, rename, directory); with
thousands of groups electing at once that becomes the bottleneck. The journal instead appends
every change of a round in one write and makes it durable with one fsync:

    record  = length u32 | xxh3-64 of the body u64 | body
    body    = msgpack [group, term, vote | nil, commit]

Replay applies records in order (the last record of a group wins); a torn tail (a bad record
with no valid record after it) is cut off, as in the segmented log, while a bad record followed
by a valid one is damage, refused with `DamagedLog` (cutting there would take back durable terms
and votes, and the node could vote twice in a term). When the journal holds more than `compact_factor` times as many
records as there are groups (plus `compact_slack`), it is rewritten atomically with one record
per group. A group's removal is a record with term -1.

Contract: `save_many` returns only once the new states are durable. A failed write or fsync
raises `StorageFailed`, and so does every later `save_many` (fail-stop: the failed fsync is
never retried, and no later record may be written after one that may be torn). A new journal's
name is made durable (its directory fsynced) before its first record is. Thread-safe.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack
import xxhash

from storage.atomic import fsync_directory, write_atomic
from storage.disk import OS_DISK, Disk
from storage.errors import DamagedLog, StorageFailed
from storage.hard_state import HardState

__all__ = ["StateJournal"]

_PREFIX = struct.Struct("<IQ")
_MAX_RECORD_BYTES = 64 * 1024


def _record(group: str, state: HardState | None) -> bytes:
    body: bytes = msgpack.packb(
        [group, -1, None, 0] if state is None else [group, state.term, state.vote, state.commit]
    )
    return _PREFIX.pack(len(body), xxhash.xxh3_64_intdigest(body)) + body


def _decode(data: bytes, position: int) -> tuple[int, list[Any]] | None:
    """(end, [group, term, vote, commit]) of a valid record at `position`, else None."""
    length, checksum = _PREFIX.unpack_from(data, position)
    end = position + _PREFIX.size + length
    if length > _MAX_RECORD_BYTES or end > len(data):
        return None
    body = data[position + _PREFIX.size : end]
    if xxhash.xxh3_64_intdigest(body) != checksum:
        return None
    try:
        fields = msgpack.unpackb(body)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(fields, list) or len(fields) != 4:
        return None
    return end, fields


class StateJournal:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        compact_factor: int = 4,
        compact_slack: int = 1024,
        disk: Disk = OS_DISK,
    ) -> None:
        self.path = os.fspath(path)
        self.compact_factor = compact_factor
        self.compact_slack = compact_slack
        self._disk = disk
        self._lock = threading.Lock()
        self._states: dict[str, HardState] = {}
        self._records = 0
        self._failed: StorageFailed | None = None
        self.truncated_bytes = 0
        existed = self._replay()
        self._fd = disk.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._name_unsynced = not existed

    def _replay(self) -> bool:
        """Loads the records; False if the journal does not exist yet."""
        data = self._disk.read_file(self.path)
        if data is None:
            return False
        position = 0
        while position + _PREFIX.size <= len(data):
            decoded = _decode(data, position)
            if decoded is None:
                break
            end, (group, term, vote, commit) = decoded
            if term < 0:
                self._states.pop(group, None)
            else:
                self._states[group] = HardState(term, vote, commit)
            self._records += 1
            position = end
        if position < len(data):
            for later in range(position + 1, len(data) - _PREFIX.size + 1):
                if _decode(data, later) is not None:
                    raise DamagedLog(
                        self.path,
                        position,
                        self._records + 1,
                        f"record {self._records + 1} is bad, yet a valid record follows at "
                        f"byte {later}: this is corruption, not a torn tail",
                    )
            self.truncated_bytes = len(data) - position
            fd = self._disk.open(self.path, os.O_RDWR)
            try:
                self._disk.ftruncate(fd, position)
                self._disk.fsync(fd)
            finally:
                self._disk.close(fd)
        return True

    @property
    def failed(self) -> StorageFailed | None:
        """The write or fsync error that stopped this journal, if one did."""
        return self._failed

    def load(self, group: str) -> HardState:
        with self._lock:
            return self._states.get(group, HardState())

    def states(self) -> dict[str, HardState]:
        with self._lock:
            return dict(self._states)

    def save_many(self, changes: Mapping[str, HardState | None]) -> None:
        """Durably records new states (None: forget the group) with one write and one fsync."""
        if not changes:
            return
        payload = b"".join(_record(group, state) for group, state in changes.items())
        with self._lock:
            if self._failed is not None:
                raise self._failed
            try:
                self._disk.write_all(self._fd, payload)
                self._disk.fsync(self._fd)
                if self._name_unsynced:
                    _fsync_ancestors(os.path.dirname(os.path.abspath(self.path)), self._disk)
                    self._name_unsynced = False
            except OSError as error:
                self._failed = StorageFailed(
                    f"state journal {self.path}: saving {len(changes)} hard state(s) failed "
                    f"({error}); it takes no more writes, and those states are not durable",
                    error.errno,
                )
                raise self._failed from error
            for group, state in changes.items():
                if state is None:
                    self._states.pop(group, None)
                else:
                    self._states[group] = state
            self._records += len(changes)
            if self._records > self.compact_factor * len(self._states) + self.compact_slack:
                self._compact_locked()

    def _compact_locked(self) -> None:
        payload = b"".join(_record(group, state) for group, state in self._states.items())
        self._disk.close(self._fd)
        self._fd = -1
        try:
            write_atomic(self.path, payload, self._disk)
            self._fd = self._disk.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as error:
            self._failed = StorageFailed(
                f"state journal {self.path}: compaction failed ({error}); it takes no more writes",
                error.errno,
            )
            raise self._failed from error
        self._records = len(self._states)

    def forget(self, groups: Iterable[str]) -> None:
        self.save_many(dict.fromkeys(groups))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._disk.close(self._fd)
                self._fd = -1


def _fsync_ancestors(directory: str, disk: Disk) -> None:
    """Makes the journal's name durable, and its directory's name in every ancestor: the
    directory may have been made just before (a fresh node's data directory, made without
    fsyncs), and a vote must not vanish with it. Once per new journal, so the cost is a few
    fsyncs at a node's first save."""
    fsync_directory(directory, disk)
    while (parent := os.path.dirname(directory)) != directory:
        directory = parent
        try:
            fsync_directory(directory, disk)
        except PermissionError:
            # an ancestor this process may not open (e.g. a home directory mode 0711) was not
            # made by it either: its entries are someone else's to make durable
            continue
