"""One node's Raft hard states, for all its groups, in one append-only journal.

A per-group state file costs two or three fsyncs per save (temp file, rename, directory); with
thousands of groups electing at once that becomes the bottleneck. The journal instead appends
every change of a round in one write and makes it durable with one fsync:

    record  = length u32 | xxh3-64 of the body u64 | body
    body    = msgpack [group, term, vote | nil, commit]

Replay applies records in order (the last record of a group wins); a torn or corrupt tail is cut
off, as in the segmented log. When the journal holds more than `compact_factor` times as many
records as there are groups (plus `compact_slack`), it is rewritten atomically with one record
per group. A group's removal is a record with term -1.

Contract: `save_many` returns only once the new states are durable. Thread-safe.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterable, Mapping

import msgpack
import xxhash

from storage.atomic import write_atomic
from storage.hard_state import HardState

__all__ = ["StateJournal"]

_PREFIX = struct.Struct("<IQ")
_MAX_RECORD_BYTES = 64 * 1024


def _record(group: str, state: HardState | None) -> bytes:
    body: bytes = msgpack.packb(
        [group, -1, None, 0] if state is None else [group, state.term, state.vote, state.commit]
    )
    return _PREFIX.pack(len(body), xxhash.xxh3_64_intdigest(body)) + body


class StateJournal:
    def __init__(
        self, path: str | os.PathLike[str], *, compact_factor: int = 4, compact_slack: int = 1024
    ) -> None:
        self.path = os.fspath(path)
        self.compact_factor = compact_factor
        self.compact_slack = compact_slack
        self._lock = threading.Lock()
        self._states: dict[str, HardState] = {}
        self._records = 0
        self.truncated_bytes = 0
        self._replay()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def _replay(self) -> None:
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return
        position = 0
        while position + _PREFIX.size <= len(data):
            length, checksum = _PREFIX.unpack_from(data, position)
            end = position + _PREFIX.size + length
            if length > _MAX_RECORD_BYTES or end > len(data):
                break
            body = data[position + _PREFIX.size : end]
            if xxhash.xxh3_64_intdigest(body) != checksum:
                break
            try:
                group, term, vote, commit = msgpack.unpackb(body)
            except (ValueError, TypeError, msgpack.UnpackException):
                break
            if term < 0:
                self._states.pop(group, None)
            else:
                self._states[group] = HardState(term, vote, commit)
            self._records += 1
            position = end
        if position < len(data):
            self.truncated_bytes = len(data) - position
            with open(self.path, "r+b") as file:
                file.truncate(position)
                file.flush()
                os.fsync(file.fileno())

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
            view = memoryview(payload)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
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
        os.close(self._fd)
        write_atomic(self.path, payload)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._records = len(self._states)

    def forget(self, groups: Iterable[str]) -> None:
        self.save_many(dict.fromkeys(groups))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
