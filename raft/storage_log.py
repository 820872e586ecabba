"""`SegmentedRaftLog`: the Raft log (`raft.log.RaftLogStorage`) over `storage.SegmentedLog`.

An entry is one stored batch: its term, its record count (0 for no-op and configuration
entries, so record offsets stay dense) and its data, copied once. The on-disk header has no kind
field; the kind follows from `(record_count, len(data))` (see `raft.types`).

What the segmented log does not keep, a small sidecar file `raft.configs` in the same directory
(on the log's disk, `SegmentedLog.disk`) does: the configuration in force at the log's boundary, and every CONFIG entry of the retained
log (they are rare, so the file is tiny). It is replaced atomically, and written

- before a CONFIG entry is appended (so a durable CONFIG entry is always listed),
- after a truncation or compaction (a listing that outlived its entry is recognised on open:
  its (index, term) no longer matches the log, and (index, term) identifies an entry),
- before a reset (its boundary configuration is then at worst newer than the log, never older).

Opening therefore never scans the log. Durability: `append` writes without fsync; `sync()`
fsyncs (`SegmentedLog.flush`); `truncate_from`, `compact` and `reset` are durable on return.
"""

from __future__ import annotations

import posixpath  # path arithmetic only (os.path on POSIX); the files go through the log's Disk
from collections.abc import Sequence
from typing import Any

import msgpack

from raft.codec import decode_config_entry, decode_configuration, encode_configuration
from raft.errors import CodecError, LogError
from raft.log import boundary_config_after
from raft.types import Configuration, Entry, EntryKind, LogBoundary, entry_kind
from storage import IndexOutOfRange, SegmentedLog
from storage.atomic import write_atomic

__all__ = ["SIDECAR_NAME", "SegmentedRaftLog"]

SIDECAR_NAME = "raft.configs"
_FORMAT = "flotilla-raft-configs/1"


class SegmentedRaftLog:
    """A `RaftLogStorage` over an open `SegmentedLog` (which it does not close)."""

    def __init__(self, log: SegmentedLog) -> None:
        self._log = log
        self._path = posixpath.join(log.directory, SIDECAR_NAME)
        self._boundary_config: Configuration | None = None
        self._configs: list[Entry] = []  # CONFIG entries, index order, possibly below first
        self._load()

    @property
    def segmented_log(self) -> SegmentedLog:
        return self._log

    # -- LogReader ---------------------------------------------------------------------------
    @property
    def first_index(self) -> int:
        return self._log.first_index

    @property
    def last_index(self) -> int:
        return self._log.last_index

    def term(self, index: int) -> int:
        try:
            return self._log.term_at(index)
        except IndexOutOfRange as error:
            raise LogError(str(error)) from None

    def entries(self, low: int, high: int, max_bytes: int) -> list[Entry]:
        log = self._log
        if not log.first_index <= low < high <= log.last_index + 1:
            raise LogError(
                f"entries [{low}, {high}) are outside the log "
                f"[{log.first_index}, {log.last_index + 1})"
            )
        result: list[Entry] = []
        for stored in log.read_from(low, max_bytes):
            if stored.index >= high:
                break
            data = bytes(stored.data)
            kind = entry_kind(stored.record_count, len(data))
            result.append(
                Entry(
                    stored.index, stored.term, kind, stored.record_count, data, stored.timestamp_ms
                )
            )
        return result

    def boundary(self) -> LogBoundary:
        log = self._log
        index = log.first_index - 1
        return LogBoundary(index, log.term_at(index), log.first_offset, self._config_at_boundary())

    def config_entries(self) -> list[Entry]:
        first = self._log.first_index
        return [e for e in self._configs if e.index >= first]

    # -- RaftLogStorage ------------------------------------------------------------------------
    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        expected = self._log.last_index + 1
        if entries[0].index != expected:
            raise LogError(f"append starts at index {entries[0].index}, expected {expected}")
        configs = [e for e in entries if e.kind is EntryKind.CONFIG]
        if configs:
            self._configs.extend(configs)
            self._save()
        for entry in entries:
            index = self._log.append(
                entry.data, entry.term, entry.record_count, entry.timestamp_ms, sync=False
            )
            if index != entry.index:  # pragma: no cover - guarded by the check above
                raise LogError(f"storage placed entry {entry.index} at index {index}")

    def truncate_from(self, index: int) -> None:
        log = self._log
        if not log.first_index <= index <= log.last_index + 1:
            raise LogError(
                f"truncation point {index} is outside [{log.first_index}, {log.last_index + 1}]"
            )
        log.truncate_from(index)
        kept = [e for e in self._configs if e.index < index]
        if len(kept) != len(self._configs):
            self._configs = kept
            self._save()

    def reset(self, boundary: LogBoundary) -> None:
        self._boundary_config = boundary.config
        self._configs = []
        self._save()
        self._log.reset(boundary.index + 1, boundary.term, boundary.next_offset)

    def compact(self, index: int) -> None:
        log = self._log
        if not log.first_index <= index <= log.last_index + 1:
            raise LogError(
                f"compaction point {index} is outside [{log.first_index}, {log.last_index + 1}]"
            )
        if index == log.first_index:
            return
        new_config = self._config_at(index - 1)
        log.truncate_prefix(index)
        self._boundary_config = new_config
        self._configs = [e for e in self._configs if e.index >= index]
        self._save()

    def sync(self) -> None:
        self._log.flush()

    # -- the sidecar -----------------------------------------------------------------------------
    def _config_at(self, index: int) -> Configuration | None:
        listed = [e for e in self._configs if e.index <= index]
        return boundary_config_after(self._boundary_config, listed)

    def _config_at_boundary(self) -> Configuration | None:
        return self._config_at(self._log.first_index - 1)

    def _save(self) -> None:
        config = self._boundary_config
        payload = {
            "format": _FORMAT,
            "boundary_config": None if config is None else encode_configuration(config),
            "configs": [[e.index, e.term, e.data] for e in self._configs],
        }
        write_atomic(self._path, msgpack.packb(payload, use_bin_type=True), self._log.disk)

    def _load(self) -> None:
        raw = self._log.disk.read_file(self._path)
        if raw is None:
            return
        try:
            payload: Any = msgpack.unpackb(raw, raw=False)
            if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
                raise CodecError(f"not a {_FORMAT} file")
            encoded = payload["boundary_config"]
            self._boundary_config = None if encoded is None else decode_configuration(encoded)
            listed = [
                Entry(int(i), int(t), EntryKind.CONFIG, 0, bytes(d), 0)
                for i, t, d in payload["configs"]
            ]
            for entry in listed:
                decode_config_entry(entry.data)
        except (CodecError, KeyError, TypeError, ValueError) as error:
            raise LogError(f"{self._path} is not a Raft configuration sidecar ({error})") from None
        log = self._log
        first, last = log.first_index, log.last_index
        # Keep what the log still holds, and what lies below the boundary (it fixes the
        # boundary configuration); drop listings of entries a truncation removed.
        self._configs = [
            e
            for e in listed
            if e.index < first or (e.index <= last and log.term_at(e.index) == e.term)
        ]
