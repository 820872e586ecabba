"""The core's view of its log: what the host has written (`LogReader`) plus what it has not yet
been handed (`unstable`), and a pending reset.

    unstable[k] is entry  offset + k
    every index >= offset is read from `unstable`; every index < offset from the written log
    (entries the written log still holds at >= offset are stale: a conflict superseded them,
    and the next Ready tells the host to truncate them: `truncate_from == offset`)

Terms are returned as `int`, or None where the view cannot say (compacted away, or past the end).
"""

from __future__ import annotations

from collections.abc import Sequence

from raft.log import LogReader
from raft.types import Entry, LogBoundary

__all__ = ["LogView"]


class LogView:
    __slots__ = ("offset", "pending_boundary", "storage", "unstable")

    def __init__(self, storage: LogReader) -> None:
        self.storage = storage
        self.unstable: list[Entry] = []
        self.offset = storage.last_index + 1
        self.pending_boundary: LogBoundary | None = None

    # -- shape ---------------------------------------------------------------------------------
    @property
    def first_index(self) -> int:
        if self.pending_boundary is not None:
            return self.pending_boundary.index + 1
        return self.storage.first_index

    @property
    def last_index(self) -> int:
        if self.unstable:
            return self.offset + len(self.unstable) - 1
        if self.pending_boundary is not None:
            return self.pending_boundary.index
        return min(self.storage.last_index, self.offset - 1)

    @property
    def stable_last_index(self) -> int:
        """The last index the host holds that the view agrees with."""
        if self.pending_boundary is not None:
            return self.pending_boundary.index
        return min(self.storage.last_index, self.offset - 1)

    @property
    def last_term(self) -> int:
        term = self.term(self.last_index)
        assert term is not None
        return term

    def term(self, index: int) -> int | None:
        if index >= self.offset:
            position = index - self.offset
            return self.unstable[position].term if position < len(self.unstable) else None
        pending = self.pending_boundary
        if pending is not None:
            return pending.term if index == pending.index else None
        storage = self.storage
        if storage.first_index - 1 <= index <= storage.last_index:
            return storage.term(index)
        return None

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Is a log ending at (last_index, last_term) at least as up to date as this one?"""
        my_term = self.last_term
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index)

    def boundary(self) -> LogBoundary:
        if self.pending_boundary is not None:
            return self.pending_boundary
        return self.storage.boundary()

    # -- reads ---------------------------------------------------------------------------------
    def entries(self, low: int, high: int, max_bytes: int) -> list[Entry]:
        """Entries low..high-1, at most `max_bytes` (but at least one when low < high)."""
        if low >= high:
            return []
        result: list[Entry] = []
        if low < self.offset:
            result = self.storage.entries(low, min(high, self.offset), max_bytes)
            if low + len(result) < min(high, self.offset):
                return result
        start = max(low, self.offset)
        if start < high:
            total = sum(e.size_bytes for e in result)
            for entry in self.unstable[start - self.offset : high - self.offset]:
                total += entry.size_bytes
                if result and total > max_bytes:
                    break
                result.append(entry)
        return result

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """The index of the first entry that is new or disagrees with the log; 0 if none."""
        for entry in entries:
            if self.term(entry.index) != entry.term:
                return entry.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (i, term(i)) with i <= index and term(i) <= term: where a log whose entry
        at `index` has `term` may still agree with this one. (i, 0) if the terms ran out."""
        while index > 0:
            found = self.term(index)
            if found is None:
                return index, 0
            if found <= term:
                return index, found
            index -= 1
        return 0, 0

    # -- writes (in memory; the host persists them from the Ready) ----------------------------
    def append(self, entries: Sequence[Entry]) -> None:
        """Appends or overwrites from `entries[0].index` (<= last_index + 1)."""
        first = entries[0].index
        end = self.offset + len(self.unstable)
        if first == end:
            self.unstable.extend(entries)
        elif first <= self.offset:
            self.offset = first
            self.unstable = list(entries)
        else:
            self.unstable = self.unstable[: first - self.offset]
            self.unstable.extend(entries)

    def stable_to(self, index: int, term: int) -> None:
        """The host has written every entry up to (index, term): they leave `unstable`."""
        if index < self.offset or self.term(index) != term:
            return  # superseded since the Ready was taken; the next Ready rewrites it
        self.unstable = self.unstable[index + 1 - self.offset :]
        self.offset = index + 1

    def restore(self, boundary: LogBoundary) -> None:
        """Starts over after `boundary`; the host resets its log from the next Ready."""
        self.unstable = []
        self.offset = boundary.index + 1
        self.pending_boundary = boundary

    def boundary_written(self, boundary: LogBoundary) -> None:
        if self.pending_boundary is boundary:
            self.pending_boundary = None
