"""The producer snapshot's bytes: a partition's producer table (`cluster.producers`) as of one log
entry, which a replica saves every `SNAPSHOT_EVERY_ENTRIES` entries so that a restart replays
only the entries after it (`cluster.replica` does the file I/O; this module only encodes and
decodes). Pure: no I/O, no clock.

Format 2 (written):

    file  = xxh3_64_digest(body) (8 bytes) + body
    body  = msgpack [2, index, term, clock_ms, rows]
    rows  = [[producer_id, [[base_sequence, index, term, record_count, timestamp_ms], ...]], ...]
            (`ProducerTable.dump_rows`: least recently written producer first)

`index` and `term` name the last log entry the table covers; `clock_ms` is the table's clock
(the largest entry timestamp it noted). Format 1 (read, for an upgrade) came before timestamps:
`[1, index, term, rows]` with four fields a batch; `DecodedSnapshot.dated` dates its batches.

A file that is torn (shorter than its digest), fails its checksum, is not msgpack of that shape,
or has another format number is refused with a `SnapshotError` naming what is wrong; the replica
then rebuilds the table by scanning the log instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import xxhash

from cluster.errors import ClusterError
from cluster.producers import Batches, ProducerTable

__all__ = [
    "FORMAT",
    "DecodedSnapshot",
    "ProducerSnapshot",
    "SnapshotError",
    "UnknownSnapshotFormat",
    "decode_snapshot",
    "encode_snapshot",
]

FORMAT = 2  # 2: [format, index, term, clock_ms, rows]; batches carry timestamps
_READABLE = (1, FORMAT)
_DIGEST_BYTES = 8


class SnapshotError(ClusterError, ValueError):
    """Bytes that are not a producer snapshot this version can read."""


class UnknownSnapshotFormat(SnapshotError):
    """A well-formed snapshot of a format this version does not read (a newer one)."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """The producer table as of entry (`index`, `term`): copied on the event loop (cheap),
    encoded and written by the storage thread (`Replica.save_snapshot`)."""

    index: int
    term: int
    clock_ms: int
    rows: list[tuple[int, Batches]]


@dataclass(frozen=True, slots=True)
class DecodedSnapshot:
    """A snapshot read back: the entry it ends at, and the table in `ProducerTable.load`'s
    form. `clock_ms` is None for format 1, whose batches carry no timestamp (see `dated`)."""

    format: int
    index: int
    term: int
    clock_ms: int | None
    dumped: list[Any]

    def dated(self, timestamp_ms: int) -> tuple[int, list[Any]]:
        """(clock_ms, rows) for `ProducerTable.load`. A format-1 snapshot's batches are dated
        `timestamp_ms` (give the timestamp of the entry it ends at: as if every producer wrote
        there, so they expire an expiration after it, not at once), as is its clock."""
        if self.clock_ms is not None:
            return self.clock_ms, self.dumped
        rows = [
            [pid, [[*batch, timestamp_ms] for batch in batches]] for pid, batches in self.dumped
        ]
        return timestamp_ms, rows


def encode_snapshot(snapshot: ProducerSnapshot) -> bytes:
    """The file's bytes for `snapshot`, in format 2 (digest, then body)."""
    dumped = ProducerTable.dump_rows(snapshot.rows)
    body: bytes = msgpack.packb([FORMAT, snapshot.index, snapshot.term, snapshot.clock_ms, dumped])
    return xxhash.xxh3_64_digest(body) + body


def decode_snapshot(data: bytes) -> DecodedSnapshot:
    """What `encode_snapshot` (or format 1) wrote; raises `SnapshotError` (or
    `UnknownSnapshotFormat`) for anything else. The rows are checked by `ProducerTable.load`."""
    if len(data) < _DIGEST_BYTES:
        raise SnapshotError(
            f"producer snapshot of {len(data)} bytes is torn: it must hold at least its "
            f"{_DIGEST_BYTES}-byte checksum"
        )
    digest, body = data[:_DIGEST_BYTES], data[_DIGEST_BYTES:]
    if xxhash.xxh3_64_digest(body) != digest:
        raise SnapshotError(
            f"producer snapshot checksum mismatch: {digest.hex()} saved, "
            f"{xxhash.xxh3_64_digest(body).hex()} computed over its {len(body)} bytes"
        )
    try:
        fields = msgpack.unpackb(body)
    except Exception as error:  # msgpack's errors have no common base beyond ValueError
        raise SnapshotError(f"producer snapshot body is not msgpack: {error}") from None
    if not isinstance(fields, list) or not fields or not _is_int(fields[0]):
        raise SnapshotError(
            f"producer snapshot body {_describe(fields)} is not a list starting with a format"
        )
    version = fields[0]
    if version not in _READABLE:
        raise UnknownSnapshotFormat(
            f"producer snapshot format {version} is not readable: formats {_READABLE} are"
        )
    expected = 4 if version == 1 else 5
    if (
        len(fields) != expected
        or not all(_is_int(field) for field in fields[1 : expected - 1])
        or not isinstance(fields[-1], list)
    ):
        raise SnapshotError(
            f"producer snapshot {_describe(fields)} is not format {version}: "
            + ("[1, index, term, rows]" if version == 1 else "[2, index, term, clock_ms, rows]")
        )
    if version == 1:
        return DecodedSnapshot(1, fields[1], fields[2], None, fields[3])
    return DecodedSnapshot(version, fields[1], fields[2], fields[3], fields[4])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
