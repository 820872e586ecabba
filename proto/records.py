"""The record batch: encoded once by the producer, stored and replicated as opaque bytes.

    offset  size  field
         0     1  magic               0xF1 (format 1)
         1     1  attributes          0 (bits reserved for compression)
         2     2  reserved            0
         4     4  record_count        u32, >= 1
         8     8  producer_id         u64; 0 = not an idempotent producer
        16     8  base_sequence       i64; sequence of the first record (per producer, partition)
        24     8  first_timestamp_ms  i64
        32     8  body_checksum       xxh3-64 of the body
        40     .  body                msgpack array of `record_count` records, each
                                      [key: bin | nil, value: bin, headers: [[str, bin], ...],
                                       timestamp_delta_ms: int]

The server reads only the 40-byte header, checks the body checksum (one C call) and that the
body's msgpack array length equals `record_count` (its first bytes): O(1) Python work per batch,
never per record. Clients decode records; a record's offset is the stored batch's base offset
plus its position in the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import xxhash

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "InvalidBatch",
    "Record",
    "decode_batch",
    "encode_batch",
    "encode_rows",
    "peek_producer",
    "peek_record_count",
    "read_header",
    "with_producer",
]

MAGIC = 0xF1
_HEADER = struct.Struct("<BBHIQqqQ")
BATCH_HEADER_SIZE = _HEADER.size
MAX_RECORDS = 1_000_000

Header = tuple[str, bytes]


class InvalidBatch(ValueError):
    """A batch that is not well formed; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[Header, ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class BatchHeader:
    record_count: int
    producer_id: int
    base_sequence: int
    first_timestamp_ms: int


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes, Sequence[Header] | None, int]],
    *,
    producer_id: int = 0,
    base_sequence: int = 0,
) -> bytes:
    """Encodes (key, value, headers, timestamp_ms) tuples into one batch."""
    if not records:
        raise InvalidBatch("a batch needs at least one record")
    first_timestamp = records[0][3]
    rows = [
        [key, value, [list(h) for h in headers] if headers else [], timestamp - first_timestamp]
        for key, value, headers, timestamp in records
    ]
    return encode_rows(rows, first_timestamp, producer_id=producer_id, base_sequence=base_sequence)


def encode_rows(
    rows: Sequence[list[Any]],
    first_timestamp: int,
    *,
    producer_id: int = 0,
    base_sequence: int = 0,
) -> bytes:
    """Encodes records already in their stored shape, `[key, value, [[name, data], ...],
    timestamp_ms - first_timestamp]`, into one batch (the producer builds them so as it goes)."""
    if not rows:
        raise InvalidBatch("a batch needs at least one record")
    body: bytes = msgpack.packb(rows, use_bin_type=True)
    header = _HEADER.pack(
        MAGIC,
        0,
        0,
        len(rows),
        producer_id,
        base_sequence,
        first_timestamp,
        xxhash.xxh3_64_intdigest(body),
    )
    return header + body


def _array_length(body: memoryview) -> int | None:
    if not body:
        return None
    lead = body[0]
    if 0x90 <= lead <= 0x9F:
        return lead & 0x0F
    if lead == 0xDC and len(body) >= 3:
        return int.from_bytes(body[1:3], "big")
    if lead == 0xDD and len(body) >= 5:
        return int.from_bytes(body[1:5], "big")
    return None


def read_header(batch: bytes | memoryview) -> BatchHeader:
    """Validates a batch in O(1) Python work and returns its header."""
    view = memoryview(batch)
    if len(view) < BATCH_HEADER_SIZE:
        raise InvalidBatch(
            f"batch of {len(view)} bytes is shorter than its {BATCH_HEADER_SIZE}-byte header"
        )
    magic, _attributes, _reserved, count, producer_id, sequence, timestamp, checksum = (
        _HEADER.unpack_from(view, 0)
    )
    if magic != MAGIC:
        raise InvalidBatch(f"batch magic byte is {magic:#x}; format 1 expects {MAGIC:#x}")
    if not 1 <= count <= MAX_RECORDS:
        raise InvalidBatch(f"record_count={count} must be in 1..{MAX_RECORDS}")
    body = view[BATCH_HEADER_SIZE:]
    if xxhash.xxh3_64_intdigest(body) != checksum:
        raise InvalidBatch("batch body checksum mismatch: the batch was damaged in transit")
    if _array_length(body) != count:
        raise InvalidBatch(f"batch body does not hold the {count} records its header announces")
    if producer_id and sequence < 0:
        raise InvalidBatch(f"base_sequence={sequence} must be >= 0 for producer {producer_id}")
    return BatchHeader(count, producer_id, sequence, timestamp)


def peek_producer(batch: bytes | memoryview) -> tuple[int, int]:
    """(producer_id, base_sequence) of an already validated batch, without checksum work."""
    _, _, _, _, producer_id, sequence, _, _ = _HEADER.unpack_from(batch, 0)
    return producer_id, sequence


_PRODUCER = struct.Struct("<Qq")  # producer_id, base_sequence: at offset 8 of the header


def with_producer(batch: bytes, producer_id: int, base_sequence: int) -> bytes:
    """The batch under another producer id and first sequence (the body, and so its checksum,
    unchanged): how a client resends a batch a node refused as from an unknown producer."""
    return batch[:8] + _PRODUCER.pack(producer_id, base_sequence) + batch[24:]


def peek_record_count(batch: bytes | memoryview) -> int:
    """The record count of an already validated batch, without checksum work."""
    return int(_HEADER.unpack_from(batch, 0)[3])


def decode_batch(batch: bytes | memoryview, base_offset: int) -> list[Record]:
    """The records of a stored batch (client side). Raises InvalidBatch if malformed."""
    header = read_header(batch)
    try:
        rows = msgpack.unpackb(memoryview(batch)[BATCH_HEADER_SIZE:], raw=False)
        return [
            Record(
                base_offset + position,
                key,
                value,
                tuple((name, data) for name, data in headers),
                header.first_timestamp_ms + delta,
            )
            for position, (key, value, headers, delta) in enumerate(rows)
        ]
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise InvalidBatch(f"batch body is not a list of records: {error}") from None
