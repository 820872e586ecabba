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

`read_header` reads the 40-byte header, checks the body checksum (one C call) and that the
body's msgpack array length equals `record_count` (its first bytes): O(1) Python work per batch.
The server also checks the body's shape with `check_body` before it writes a batch, since a
malformed body once committed would fail every consumer of the partition at that offset. A
batch of up to `WHOLE_CHECK_RECORDS` records is checked in one C pass by msgspec's typed
msgpack decoder (each record an array-like struct the garbage collector does not track; no
Python bytecode runs per record). A batch of more records (small records: the pass's transient
objects, ~100-150 bytes a record, would outgrow the batch) and every batch that pass refuses go
through msgpack's C unpacker in chunks of `CHECK_CHUNK_RECORDS` records with limits
(no maps or extension types, no string or array longer than the batch allows), each chunk
checked column by column with C-level passes (`map`, `zip`, `set`); on a fault it names the
first bad record and what is wrong with it. Clients decode records; a record's offset is the
stored batch's base offset plus its position in the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

import msgpack
import msgspec
import xxhash

__all__ = [
    "BATCH_HEADER_SIZE",
    "CHECK_CHUNK_RECORDS",
    "WHOLE_CHECK_RECORDS",
    "BatchHeader",
    "InvalidBatch",
    "Record",
    "check_body",
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
# records unpacked at a time by `check_body`: bounds its transient objects (~100 bytes a record
# beyond the record's own bytes) while keeping the per-chunk Python overhead negligible
CHECK_CHUNK_RECORDS = 4096
# the most records `check_body` checks in one msgspec pass: its transient objects (a copy of
# the body, and a struct and a bytes object a record and a header, ~100-150 bytes) stay within
# a few MiB, about the size of the largest batch
WHOLE_CHECK_RECORDS = 16384
_SHAPE = "[key: bin | nil, value: bin, headers: [[str, bin], ...], timestamp_delta_ms: int]"
_KEY_TYPES = frozenset({bytes, type(None)})

Header = tuple[str, bytes]


class InvalidBatch(ValueError):
    """A batch that is not well formed; the message says what is wrong."""


class _StoredHeader(
    msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True
):
    """A record header as `check_body`'s one pass checks it: an array of exactly [str, bin]."""

    name: str
    data: bytes


class _StoredRecord(
    msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True
):
    """A record in its stored shape, as `check_body`'s one pass checks it: an array of exactly
    these four (`forbid_unknown_fields`: no fifth). Structs the garbage collector does not
    track, and bin fields as bytes (a memoryview is tracked): a pass over thousands of records
    starts no collection (2-3x faster than tuples and memoryviews for small records)."""

    key: bytes | None
    value: bytes
    headers: tuple[_StoredHeader, ...]
    timestamp_delta_ms: int


_STORED_BODY = msgspec.msgpack.Decoder(tuple[_StoredRecord, ...])
# The body's encoder: the same bytes as msgpack's `packb(rows, use_bin_type=True)` (bytes as
# bin, str as str, tuples as arrays, every int in its smallest form; a test holds them equal),
# in 0.07 ms for 1,000 records of 1 KiB against packb's 1.4-2.2 ms on the same thread (packb
# grows its buffer from a few KiB, a copy at each doubling). Used from the producer's sender
# threads at once: an Encoder keeps no state between calls.
_ROWS = msgspec.msgpack.Encoder()


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
    rows: Sequence[Sequence[Any]],
    first_timestamp: int,
    *,
    producer_id: int = 0,
    base_sequence: int = 0,
) -> bytes:
    """Encodes records already in their stored shape, `[key, value, [[name, data], ...],
    timestamp_ms - first_timestamp]`, into one batch (the producer builds them so as it goes,
    as tuples: msgpack writes a tuple as an array, as it writes a list)."""
    if not rows:
        raise InvalidBatch("a batch needs at least one record")
    body = _ROWS.encode(rows)
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


def check_body(batch: bytes | memoryview, *, whole_up_to: int = WHOLE_CHECK_RECORDS) -> None:
    """Checks that the body of a batch `read_header` accepted is exactly `record_count` records
    of the stored shape, and nothing after them. Raises InvalidBatch naming the first bad
    record and what is wrong with it. A batch of at most `whole_up_to` records is checked in
    one C pass; the chunked check runs for larger ones, and for the message when it fails."""
    view = memoryview(batch)
    count = peek_record_count(view)
    if count <= whole_up_to:
        try:
            _STORED_BODY.decode(view[BATCH_HEADER_SIZE:])
            return
        except (msgspec.DecodeError, ValueError) as error:  # bad UTF-8 is a UnicodeDecodeError
            refusal = f"{error}"
        _check_chunks(view, count)  # names the first bad record; here it raises
        raise InvalidBatch(f"batch body is not {count} records of the shape {_SHAPE}: {refusal}")
    _check_chunks(view, count)


def _check_chunks(view: memoryview, count: int) -> None:
    """`check_body` a chunk of records at a time, with msgpack's unpacker."""
    body = view[BATCH_HEADER_SIZE:]
    unpacker = msgpack.Unpacker(
        use_list=False,
        raw=False,
        max_buffer_size=len(body),
        max_bin_len=len(body),
        max_str_len=len(body),
        # the batch, a record, a record's headers: none can hold more elements than the body
        # has bytes (a record may carry more headers than its batch has records)
        max_array_len=max(count, 4, len(body)),
        max_map_len=0,
        max_ext_len=0,
    )
    unpacker.feed(body)
    position = 0
    try:
        length = unpacker.read_array_header()
        if length != count:
            raise InvalidBatch(f"batch body holds {length} records; its header says {count}")
        while position < count:
            chunk = tuple(islice(unpacker, min(CHECK_CHUNK_RECORDS, count - position)))
            if len(chunk) < min(CHECK_CHUNK_RECORDS, count - position):
                raise InvalidBatch(
                    f"batch body ends after {position + len(chunk)} of its {count} records"
                )
            if not _chunk_is_well_formed(chunk):
                raise InvalidBatch(_first_fault(chunk, position))
            position += len(chunk)
    except InvalidBatch:
        raise
    except msgpack.OutOfData:
        raise InvalidBatch(f"batch body ends inside record {position} of {count}") from None
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise InvalidBatch(
            f"batch body is not valid msgpack at or after record {position} of {count} "
            f"({type(error).__name__}{': ' if str(error) else ''}{error})"
        ) from None
    extra = len(body) - unpacker.tell()
    if extra:
        raise InvalidBatch(f"batch body has {extra} bytes after its {count} records")


def _chunk_is_well_formed(rows: tuple[Any, ...]) -> bool:
    """Every row has the stored shape, checked with C-level passes only."""
    if set(map(type, rows)) != {tuple} or set(map(len, rows)) != {4}:
        return False
    keys, values, headers, deltas = zip(*rows, strict=True)
    if not (
        set(map(type, keys)) <= _KEY_TYPES
        and set(map(type, values)) == {bytes}
        and set(map(type, deltas)) == {int}
        and set(map(type, headers)) == {tuple}
    ):
        return False
    pairs = tuple(chain.from_iterable(headers))
    if not pairs:
        return True
    if set(map(type, pairs)) != {tuple} or set(map(len, pairs)) != {2}:
        return False
    names, data = zip(*pairs, strict=True)
    return set(map(type, names)) == {str} and set(map(type, data)) == {bytes}


def _first_fault(rows: tuple[Any, ...], first_position: int) -> str:
    """What is wrong with the first bad row of a chunk (the error path: per record is fine)."""
    for offset, row in enumerate(rows):
        where = f"record {first_position + offset}"
        if type(row) is not tuple or len(row) != 4:
            return f"{where} is {_kind(row)}; a record is {_SHAPE}"
        key, value, headers, delta = row
        if type(key) not in _KEY_TYPES:
            return f"{where}: key is {_kind(key)}; expected bin or nil"
        if type(value) is not bytes:
            return f"{where}: value is {_kind(value)}; expected bin"
        if type(delta) is not int:
            return f"{where}: timestamp_delta_ms is {_kind(delta)}; expected int"
        if type(headers) is not tuple:
            return f"{where}: headers is {_kind(headers)}; expected an array of [str, bin]"
        for number, pair in enumerate(headers):
            if type(pair) is not tuple or len(pair) != 2:
                return f"{where}: header {number} is {_kind(pair)}; expected [str, bin]"
            if type(pair[0]) is not str or type(pair[1]) is not bytes:
                return (
                    f"{where}: header {number} is [{_kind(pair[0])}, {_kind(pair[1])}]; "
                    "expected [str, bin]"
                )
    return "batch body is not a list of records"  # unreachable: the chunk had a bad row


def _kind(value: object) -> str:
    if type(value) is tuple:
        return f"an array of {len(value)}"
    names = {bytes: "bin", str: "str", int: "int", float: "float", bool: "bool"}
    return names.get(type(value), "nil" if value is None else type(value).__name__)


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
