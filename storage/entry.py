"""The on-disk entry: a fixed 48-byte header followed by the batch bytes.

    offset  size  field
         0     4  length         bytes of batch data that follow the header (u32)
         4     8  checksum       xxh3-64 over header[12:48] + data (u64)
        12     8  index          Raft index (u64)
        20     8  term           Raft term (u64)
        28     8  base_offset    offset of the batch's first record (u64)
        36     4  record_count   records in the batch; 0 for Raft no-op / config entries (u32)
        40     8  timestamp_ms   producer or leader timestamp (i64)

All little-endian. An entry occupies `HEADER_SIZE + length` bytes, so `next_position =
position + HEADER_SIZE + length`. The checksum covers everything after itself, so a bit flip in
the header fields or in the data is detected; a flip in `length` is caught by the checksum or by
the entry running past the end of the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from storage.errors import CorruptEntry

__all__ = ["HEADER", "HEADER_SIZE", "Entry", "encode_header", "verify"]

HEADER = struct.Struct("<IQQQQIq")
HEADER_SIZE = HEADER.size
_TAIL = struct.Struct("<QQQIq")
_PREFIX = struct.Struct("<IQ")
_xxh3 = xxhash.xxh3_64


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry. `data` is a zero-copy view of the stored batch bytes."""

    index: int
    term: int
    base_offset: int
    record_count: int
    timestamp_ms: int
    data: memoryview

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


def encode_header(
    data: bytes | memoryview,
    index: int,
    term: int,
    base_offset: int,
    record_count: int,
    timestamp_ms: int,
) -> bytes:
    tail = _TAIL.pack(index, term, base_offset, record_count, timestamp_ms)
    hasher = _xxh3(tail)
    hasher.update(data)
    return _PREFIX.pack(len(data), hasher.intdigest()) + tail


def verify(view: memoryview, at: int, where: str) -> Entry:
    """Decodes and checks the entry at `view[at:]`; raises `CorruptEntry` naming `where`."""
    if len(view) - at < HEADER_SIZE:
        raise CorruptEntry(f"{where}: truncated header ({len(view) - at} of {HEADER_SIZE} bytes)")
    length, checksum, index, term, base_offset, count, timestamp_ms = HEADER.unpack_from(view, at)
    end = at + HEADER_SIZE + length
    if end > len(view):
        raise CorruptEntry(
            f"{where}: entry length {length} runs past the end of the data ({len(view) - at} bytes)"
        )
    hasher = _xxh3(view[at + 12 : at + HEADER_SIZE])
    data = view[at + HEADER_SIZE : end]
    hasher.update(data)
    if hasher.intdigest() != checksum:
        raise CorruptEntry(f"{where}: checksum mismatch (index field {index})")
    return Entry(index, term, base_offset, count, timestamp_ms, data)
