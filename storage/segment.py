"""One segment: a `.log` file of entries and its index, held in memory as typed arrays.

Layout on disk, for a segment whose first entry has Raft index `base`:

    <base:020d>.log    entries back to back (see `storage.entry`)
    <base:020d>.index  the index of a *sealed* segment: a 32-byte header
                       (magic, row count, xxh3 of the columns) and five fixed-width columns,
                       row r describing entry `base + r`:
                       position u64 | term u64 | base_offset u64 | timestamp_ms i64 | count u32

Index → row is arithmetic (`row = index - base`); offset → row is a binary search over the
non-decreasing `base_offset` column. Neither is ever a scan. The active segment's index lives only
in memory: recovery rebuilds it by scanning the active `.log` (bounded by `segment_bytes`), and it
is written once, when the segment is sealed or the log is closed.

Invariants: `positions[0] == 0`; `positions[r+1] == positions[r] + HEADER_SIZE + length(r)`;
`base_offsets[r+1] == base_offsets[r] + counts[r]`; `size == end of the last entry`.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from contextlib import AbstractContextManager
from dataclasses import dataclass

import xxhash

from storage.entry import HEADER, HEADER_SIZE, Entry, verify
from storage.errors import CorruptEntry, StorageFailed
from storage.handles import FileHandles

__all__ = ["ScanResult", "Segment", "index_name", "log_name"]

_INDEX_MAGIC = b"FLTIDX01"
_INDEX_HEADER = struct.Struct("<8sQQQ")  # magic, rows, checksum, reserved
_INDEX_FIELD = struct.Struct("<Q")
_INDEX_AT = 12  # where an entry header holds its index (see `storage.entry`)
# How many entries past a bad one recovery looks for, to tell damage from a torn tail: damage
# that destroys more consecutive entries than this, and nothing after, reads as a torn tail.
FOLLOWER_SEARCH = 64


def log_name(base_index: int) -> str:
    return f"{base_index:020d}.log"


def index_name(base_index: int) -> str:
    return f"{base_index:020d}.index"


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan of a `.log` file found: the valid prefix and why it stopped early, if it did."""

    entries: int
    valid_bytes: int
    file_bytes: int
    problem: str | None


class Segment:
    __slots__ = (
        "base_index",
        "base_offsets",
        "counts",
        "disk",
        "handles",
        "index_path",
        "log_path",
        "positions",
        "size",
        "terms",
        "timestamps",
    )

    def __init__(self, directory: str, base_index: int, handles: FileHandles) -> None:
        self.base_index = base_index
        self.log_path = os.path.join(directory, log_name(base_index))
        self.index_path = os.path.join(directory, index_name(base_index))
        self.handles = handles
        self.disk = handles.disk
        self.positions = array("Q")
        self.terms = array("Q")
        self.base_offsets = array("Q")
        self.timestamps = array("q")
        self.counts = array("I")
        self.size = 0

    def _clear(self) -> None:
        for column in (self.positions, self.terms, self.base_offsets, self.timestamps):
            del column[:]
        del self.counts[:]
        self.size = 0

    # -- shape ------------------------------------------------------------------------------
    @property
    def entry_count(self) -> int:
        return len(self.positions)

    @property
    def last_index(self) -> int:
        return self.base_index + len(self.positions) - 1

    @property
    def first_offset(self) -> int:
        return self.base_offsets[0]

    @property
    def next_offset(self) -> int:
        return self.base_offsets[-1] + self.counts[-1]

    @property
    def newest_timestamp_ms(self) -> int:
        return max(self.timestamps) if self.timestamps else 0

    def end_of(self, row: int) -> int:
        return self.positions[row + 1] if row + 1 < len(self.positions) else self.size

    def row_for_offset(self, offset: int) -> int:
        """The row whose records include `offset` (the caller checked the range)."""
        return bisect_right(self.base_offsets, offset) - 1

    # -- writes -----------------------------------------------------------------------------
    def write(self, header: bytes, data: bytes | memoryview) -> int:
        """Writes one entry past the rows readers see, with a single `pwritev`, and returns its
        position; `record` then makes it a row. On a failed or short write nothing is recorded
        and the file takes no more writes."""
        position = self.size
        total = HEADER_SIZE + len(data)
        with self.handles.pin(self.log_path, write=True) as fd:
            try:
                written = self.disk.pwritev(fd, [header, data], position)
                if written != total:
                    raise OSError(f"short write: {written} of {total} bytes")
            except OSError as error:
                # fail-stop: whatever reached the file past `position` is not an entry, and
                # the file takes no more writes (see `FileHandles`)
                self.handles.fail(self.log_path, error)
                raise StorageFailed(
                    f"write of entry {self.base_index + len(self.positions)} to "
                    f"{self.log_path} at byte {position} failed: {error}",
                    error.errno,
                ) from error
        return position

    def record(
        self,
        position: int,
        end: int,
        term: int,
        base_offset: int,
        record_count: int,
        timestamp_ms: int,
    ) -> None:
        """Makes the entry `write` put at `position..end` the next row (under the log's reader
        lock)."""
        self.positions.append(position)
        self.terms.append(term)
        self.base_offsets.append(base_offset)
        self.timestamps.append(timestamp_ms)
        self.counts.append(record_count)
        self.size = end

    def truncate_rows(self, rows: int, publish: AbstractContextManager[object]) -> None:
        """Keeps the first `rows` entries: forgets the others while holding `publish` (so no
        reader is still reading them), then cuts the file after the rows kept."""
        with publish:
            end = self.positions[rows] if rows < len(self.positions) else self.size
            for column in (self.positions, self.terms, self.base_offsets, self.timestamps):
                del column[rows:]
            del self.counts[rows:]
            self.size = end
        with self.handles.pin(self.log_path, write=True) as fd:
            self.disk.ftruncate(fd, end)
        self.remove_index_file()

    def fsync(self) -> None:
        self.handles.fsync(self.log_path)

    # -- reads ------------------------------------------------------------------------------
    def read_rows(self, first_row: int, end_row: int) -> list[Entry]:
        """Entries of rows `first_row .. end_row-1`, with one `pread`, every checksum verified."""
        start = self.positions[first_row]
        stop = self.end_of(end_row - 1)
        with self.handles.pin(self.log_path) as fd:
            buffer = self.disk.pread(fd, stop - start, start)
        view = memoryview(buffer)
        if len(view) != stop - start:
            raise CorruptEntry(
                f"{self.log_path}: expected {stop - start} bytes at {start}, read {len(view)}"
            )
        entries = []
        for row in range(first_row, end_row):
            at = self.positions[row] - start
            entry = verify(view, at, f"{self.log_path} at byte {self.positions[row]}")
            expected = self.base_index + row
            if (
                entry.index != expected
                or at + HEADER_SIZE + len(entry.data) != self.end_of(row) - start
            ):
                raise CorruptEntry(
                    f"{self.log_path} at byte {self.positions[row]}: holds index {entry.index}, "
                    f"expected {expected}"
                )
            entries.append(entry)
        return entries

    # -- recovery ---------------------------------------------------------------------------
    def scan(self, max_batch_bytes: int, expected_offset: int | None) -> ScanResult:
        """Rebuilds the in-memory index from the `.log`, stopping at the first invalid entry."""
        with self.handles.pin(self.log_path) as fd:
            file_bytes = self.disk.size(fd)
            buffer = self.disk.pread(fd, file_bytes, 0)
        view = memoryview(buffer)
        self._clear()
        position = 0
        problem: str | None = None
        next_offset = expected_offset
        while position < file_bytes:
            if file_bytes - position < HEADER_SIZE:
                problem = f"torn header at byte {position}"
                break
            length = HEADER.unpack_from(view, position)[0]
            if length > max_batch_bytes:
                problem = f"impossible entry length {length} at byte {position}"
                break
            try:
                entry = verify(view, position, f"{self.log_path} at byte {position}")
            except CorruptEntry as error:
                problem = str(error)
                break
            expected_index = self.base_index + len(self.positions)
            if entry.index != expected_index:
                problem = f"index {entry.index} at byte {position}, expected {expected_index}"
                break
            if next_offset is not None and entry.base_offset != next_offset:
                problem = (
                    f"base offset {entry.base_offset} at byte {position}, expected {next_offset}"
                )
                break
            self.positions.append(position)
            self.terms.append(entry.term)
            self.base_offsets.append(entry.base_offset)
            self.timestamps.append(entry.timestamp_ms)
            self.counts.append(entry.record_count)
            next_offset = entry.base_offset + entry.record_count
            position += HEADER_SIZE + len(entry.data)
        self.size = position
        return ScanResult(len(self.positions), position, file_bytes, problem)

    def find_entry_after(
        self, position: int, first_index: int, max_batch_bytes: int
    ) -> tuple[int, int] | None:
        """(byte, index) of a valid entry that starts after `position` and holds one of the
        indexes `first_index + 1 .. first_index + FOLLOWER_SEARCH`, or None: where the scan
        found a bad entry (`first_index` at `position`), tells a torn tail (nothing valid
        after it) from damage in the middle (a valid entry follows)."""
        with self.handles.pin(self.log_path) as fd:
            buffer = self.disk.pread(fd, self.disk.size(fd), 0)
        return _find_entry_after(buffer, position, first_index, max_batch_bytes, self.log_path)

    def last_valid_entry(self, max_batch_bytes: int) -> tuple[int, int] | None:
        """(index, term) of the last valid entry of the `.log`, past any damage (each bad entry
        is stepped over as `find_entry_after` finds what follows it), or None if none is valid:
        the end of a damaged log, which its replica may have acknowledged (`DamagedLog`)."""
        with self.handles.pin(self.log_path) as fd:
            buffer = self.disk.pread(fd, self.disk.size(fd), 0)
        view = memoryview(buffer)
        position, index, last = 0, self.base_index, None
        while len(buffer) - position >= HEADER_SIZE:
            try:
                if HEADER.unpack_from(buffer, position)[0] > max_batch_bytes:
                    raise CorruptEntry("impossible length")
                entry = verify(view, position, self.log_path)
                if entry.index != index:
                    raise CorruptEntry(f"index {entry.index}, expected {index}")
            except CorruptEntry:
                found = _find_entry_after(buffer, position, index, max_batch_bytes, self.log_path)
                if found is None:
                    break
                position, index = found
                continue
            last = (entry.index, entry.term)
            position += HEADER_SIZE + len(entry.data)
            index += 1
        return last

    def cut_file(self, size: int) -> None:
        """Truncates the `.log` to `size` bytes and fsyncs (recovery of a torn tail)."""
        with self.handles.pin(self.log_path, write=True) as fd:
            self.disk.ftruncate(fd, size)
        self.handles.fsync(self.log_path)

    def load_index(self) -> bool:
        """Loads a sealed segment's `.index`; False if it is missing, short or damaged, or if
        its rows do not describe the `.log` as it is (e.g. an index that outlived entries a
        crash took away): the caller rebuilds it from the `.log` then."""
        raw = self.disk.read_file(self.index_path)
        if raw is None or len(raw) < _INDEX_HEADER.size:
            return False
        magic, rows, checksum, _ = _INDEX_HEADER.unpack_from(raw, 0)
        body = memoryview(raw)[_INDEX_HEADER.size :]
        if (
            magic != _INDEX_MAGIC
            or rows == 0
            or len(body) != rows * 36
            or xxhash.xxh3_64_intdigest(body) != checksum
        ):
            return False
        cut = 0
        for column, width in (
            (self.positions, 8),
            (self.terms, 8),
            (self.base_offsets, 8),
            (self.timestamps, 8),
            (self.counts, 4),
        ):
            del column[:]
            column.frombytes(body[cut : cut + rows * width])
            cut += rows * width
        with self.handles.pin(self.log_path) as fd:
            self.size = self.disk.size(fd)
            last = self.positions[-1]
            header = self.disk.pread(fd, HEADER_SIZE, last) if last < self.size else b""
        # the rows must fit the file: the last row's entry ends exactly where the file does
        if self.positions[0] != 0 or len(header) != HEADER_SIZE:
            self._clear()
            return False
        if last + HEADER_SIZE + HEADER.unpack_from(header, 0)[0] != self.size:
            self._clear()
            return False
        return True

    def write_index(self) -> None:
        """Writes the index of a sealed segment durably under its name (temp file, fsync,
        rename); the caller fsyncs the directory, and has fsynced the `.log` first, so an
        index on disk never describes entries the `.log` lost."""
        body = b"".join(
            column.tobytes()
            for column in (
                self.positions,
                self.terms,
                self.base_offsets,
                self.timestamps,
                self.counts,
            )
        )
        header = _INDEX_HEADER.pack(
            _INDEX_MAGIC, len(self.positions), xxhash.xxh3_64_intdigest(body), 0
        )
        temp = self.index_path + ".tmp"
        fd = self.disk.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.disk.write_all(fd, header + body)
            self.disk.fsync(fd)
        finally:
            self.disk.close(fd)
        self.disk.replace(temp, self.index_path)

    def remove_index_file(self) -> None:
        try:
            self.disk.unlink(self.index_path)
        except FileNotFoundError:
            pass

    def delete_files(self) -> None:
        self.handles.discard(self.log_path)
        for path in (self.log_path, self.index_path):
            try:
                self.disk.unlink(path)
            except FileNotFoundError:
                pass


def _find_entry_after(
    buffer: bytes, position: int, first_index: int, max_batch_bytes: int, where: str
) -> tuple[int, int] | None:
    """`Segment.find_entry_after` on the `.log`'s bytes. Searches first where the bad entry's
    length says the next one starts, then for each candidate index's bytes."""
    view = memoryview(buffer)

    def valid(at: int, index: int) -> bool:
        if at <= position or len(buffer) - at < HEADER_SIZE:
            return False
        if HEADER.unpack_from(buffer, at)[0] > max_batch_bytes:
            return False
        try:
            return verify(view, at, where).index == index
        except CorruptEntry:
            return False

    if len(buffer) - position >= HEADER_SIZE:
        following = position + HEADER_SIZE + HEADER.unpack_from(buffer, position)[0]
        if valid(following, first_index + 1):
            return following, first_index + 1
    for index in range(first_index + 1, first_index + 1 + FOLLOWER_SEARCH):
        needle = _INDEX_FIELD.pack(index)
        found = buffer.find(needle, position + 1 + _INDEX_AT)
        while found >= 0:
            if valid(found - _INDEX_AT, index):
                return found - _INDEX_AT, index
            found = buffer.find(needle, found + 1)
    return None
