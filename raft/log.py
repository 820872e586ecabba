"""The Raft log: the interface the core reads and the host writes, and an in-memory log.

`LogReader` is all the core ever calls: it reads, and never writes. The host writes the log
from each `Ready` (`truncate_from`, `append`, `reset`, `sync`) and trims it for retention
(`compact`). Two implementations share the interface and one conformance suite:

- `MemoryLog` (here): for the simulator and tests. It models durability: writes are volatile
  until `sync()`, and `crashed()` returns the log a restart would find, so a simulated crash
  loses exactly what a real one could (including an unsynced truncation coming undone).
- `raft.storage_log.SegmentedRaftLog`: the same over `storage.SegmentedLog` on disk.

Coordinates, for a log whose boundary (see `LogBoundary`) is `b`:

    first_index == b.index + 1
    last_index  == first_index + (entries retained) - 1
    term(i)     is defined for first_index - 1 <= i <= last_index; term(b.index) == b.term
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from raft.codec import decode_config_entry
from raft.errors import LogError
from raft.types import Configuration, Entry, EntryKind, LogBoundary

__all__ = ["LogReader", "MemoryLog", "RaftLogStorage", "boundary_config_after"]


class LogReader(Protocol):
    """What the Raft core reads. Implementations must answer from what has been written,
    durable or not."""

    @property
    def first_index(self) -> int: ...

    @property
    def last_index(self) -> int: ...

    def term(self, index: int) -> int:
        """The term of entry `index`, for first_index - 1 <= index <= last_index; else
        `LogError`."""
        ...

    def entries(self, low: int, high: int, max_bytes: int) -> list[Entry]:
        """Entries low..high-1 (first_index <= low < high <= last_index + 1), stopping before
        the total `size_bytes` would exceed `max_bytes`, but always at least one."""
        ...

    def boundary(self) -> LogBoundary:
        """The point before the first retained entry, with the configuration in force there."""
        ...

    def config_entries(self) -> list[Entry]:
        """Every CONFIG entry of the retained log, in index order (read once, at startup)."""
        ...


class RaftLogStorage(LogReader, Protocol):
    """What the host writes. See `raft.core` for the order a `Ready` is written in."""

    def append(self, entries: Sequence[Entry]) -> None:
        """Writes entries; `entries[0].index == last_index + 1`. Not durable until `sync`."""
        ...

    def truncate_from(self, index: int) -> None:
        """Drops entries index..last_index (first_index <= index <= last_index + 1)."""
        ...

    def reset(self, boundary: LogBoundary) -> None:
        """Drops every entry; the log restarts after `boundary` (a `Ready.boundary`)."""
        ...

    def compact(self, index: int) -> None:
        """Retention: drops entries below `index` (first_index <= index <= last_index + 1).
        Only committed entries may be compacted: `index <= commit + 1`."""
        ...

    def sync(self) -> None:
        """Makes everything written so far durable."""
        ...


def boundary_config_after(
    old: Configuration | None, dropped_configs: Sequence[Entry]
) -> Configuration | None:
    """The configuration in force at a new boundary, given the old boundary's configuration and
    the CONFIG entries being compacted away (in index order)."""
    for entry in reversed(dropped_configs):
        return decode_config_entry(entry.data)[1]
    return old


_State = tuple[LogBoundary, list[Entry], int]  # (boundary, entries list, length in use)


class MemoryLog:
    """An in-memory `RaftLogStorage` that remembers what a crash could keep.

    A state is `(boundary, entries list, length)`. Appends extend the live list in place (an
    earlier state's prefix is unaffected); every other mutation builds a new list, so a captured
    state is never disturbed and capturing one is O(1). `sync()` captures the durable state;
    every write since is remembered too, because a crash keeps the durable state plus any prefix
    of the writes made after it (a torn tail), never less.
    """

    __slots__ = ("_boundary", "_durable", "_entries", "_unsynced")

    def __init__(self, boundary: LogBoundary | None = None) -> None:
        self._boundary = boundary or LogBoundary()
        self._entries: list[Entry] = []
        self._durable: _State = (self._boundary, self._entries, 0)
        self._unsynced: list[_State] = []  # the state after each write since the last sync

    # -- LogReader ---------------------------------------------------------------------------
    @property
    def first_index(self) -> int:
        return self._boundary.index + 1

    @property
    def last_index(self) -> int:
        return self._boundary.index + len(self._entries)

    def term(self, index: int) -> int:
        position = index - self._boundary.index - 1
        if position == -1:
            return self._boundary.term
        if 0 <= position < len(self._entries):
            return self._entries[position].term
        raise LogError(
            f"term of index {index} is unknown: the log holds terms for "
            f"{self._boundary.index}..{self.last_index}"
        )

    def entries(self, low: int, high: int, max_bytes: int) -> list[Entry]:
        first = self._boundary.index + 1
        if not first <= low < high <= self.last_index + 1:
            raise LogError(
                f"entries [{low}, {high}) are outside the log [{first}, {self.last_index + 1})"
            )
        result: list[Entry] = []
        total = 0
        for entry in self._entries[low - first : high - first]:
            total += entry.size_bytes
            if result and total > max_bytes:
                break
            result.append(entry)
        return result

    def boundary(self) -> LogBoundary:
        return self._boundary

    def config_entries(self) -> list[Entry]:
        return [e for e in self._entries if e.kind is EntryKind.CONFIG]

    # -- RaftLogStorage ------------------------------------------------------------------------
    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        expected = self.last_index + 1
        if entries[0].index != expected:
            raise LogError(f"append starts at index {entries[0].index}, expected {expected}")
        self._entries.extend(entries)
        self._wrote()

    def truncate_from(self, index: int) -> None:
        first = self._boundary.index + 1
        if not first <= index <= self.last_index + 1:
            raise LogError(f"truncation point {index} is outside [{first}, {self.last_index + 1}]")
        self._entries = self._entries[: index - first]
        self._wrote()

    def reset(self, boundary: LogBoundary) -> None:
        self._boundary = boundary
        self._entries = []
        self._wrote()

    def compact(self, index: int) -> None:
        first = self._boundary.index + 1
        if not first <= index <= self.last_index + 1:
            raise LogError(f"compaction point {index} is outside [{first}, {self.last_index + 1}]")
        if index == first:
            return
        dropped = self._entries[: index - first]
        config = boundary_config_after(
            self._boundary.config, [e for e in dropped if e.kind is EntryKind.CONFIG]
        )
        next_offset = self._boundary.next_offset + sum(e.record_count for e in dropped)
        self._boundary = LogBoundary(index - 1, dropped[-1].term, next_offset, config)
        self._entries = self._entries[index - first :]
        self._wrote()

    def sync(self) -> None:
        self._durable = (self._boundary, self._entries, len(self._entries))
        self._unsynced.clear()

    def _wrote(self) -> None:
        self._unsynced.append((self._boundary, self._entries, len(self._entries)))

    # -- crash model ---------------------------------------------------------------------------
    @property
    def durable_boundary(self) -> LogBoundary:
        return self._durable[0]

    @property
    def durable_last_index(self) -> int:
        boundary, _, length = self._durable
        return boundary.index + length

    def durable_term(self, index: int) -> int | None:
        """The term of `index` in the durable log; None if it is not there."""
        boundary, entries, length = self._durable
        position = index - boundary.index - 1
        if position == -1:
            return boundary.term
        if 0 <= position < length:
            return entries[position].term
        return None

    def crashed(self, rng: random.Random | None = None) -> MemoryLog:
        """The log a process restarting after a crash would find: the last synced state, or,
        given `rng`, that plus a random prefix of the writes since (possibly ending part-way
        through a multi-entry append)."""
        boundary, entries, length = self._durable
        if rng is not None and self._unsynced:
            states = [self._durable, *self._unsynced]
            kept = rng.randrange(len(states))
            boundary, entries, length = states[kept]
            if kept:
                _, before_entries, before_length = states[kept - 1]
                if before_entries is entries and before_length < length:  # an append: tear it
                    length = rng.randint(before_length, length)
        log = MemoryLog(boundary)
        log._entries = entries[:length]
        log.sync()
        return log
