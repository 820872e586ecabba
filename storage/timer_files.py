"""The timer index's file formats (`storage.timer_index`): entries and the state file.

    entry (32 bytes) = kind u8 | pad 3 | record_count u32 | due_ms i64 | offset u64
                       | xxh3-64 of the 24 bytes before it u64          (little-endian)
    kind ADDED: a timer batch at `offset`; kind FIRED: the batch at `offset` was planned
    state            = length u32 | xxh3-64 of the body u64 | msgpack body (`IndexState`)

An entry names its due time, so its bucket (due_ms // bucket_ms), wherever it is stored.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
import xxhash

from storage.disk import Disk
from storage.errors import CorruptLog
from timers.types import Plan, TimerBatch

__all__ = [
    "ADDED",
    "ENTRY_SIZE",
    "FIRED",
    "BucketState",
    "CorruptTimerIndex",
    "IndexState",
    "check_entries",
    "decode_state",
    "encode_entry",
    "encode_state",
    "entries",
    "entries_of",
    "file_size",
    "group_by_bucket",
    "read_prefix",
    "truncate",
]

_ENTRY = struct.Struct("<B3xIqQ")
_CHECK = struct.Struct("<Q")
_WHOLE = struct.Struct("<B3xIqQQ")
_SPLIT = struct.Struct("<24sQ")  # the checked bytes, the checksum
_KIND = struct.Struct("<B31x")
_DUE = struct.Struct("<8xq16x")
ENTRY_SIZE = _WHOLE.size  # 32
ADDED, FIRED = 1, 2
_PREFIX = struct.Struct("<IQ")
VERSION = 1
_xxh3 = xxhash.xxh3_64_intdigest


class CorruptTimerIndex(CorruptLog):
    """The index is damaged beyond what recovery may repair (a bad entry in a flushed part of
    a file, a file shorter than its state says, a bad state file). Nothing was changed; rebuild
    the index from the timer log (replay it from offset 0)."""


def encode_entry(kind: int, batch: TimerBatch) -> bytes:
    body = _ENTRY.pack(kind, batch.record_count, batch.due_ms, batch.offset)
    return body + _CHECK.pack(_xxh3(body))


def check_entries(data: bytes, where: str) -> None:
    """Raises `CorruptTimerIndex` naming the first bad entry of `data` (a whole number of
    entries: the flushed part of a file). Every entry is checked, whatever its bucket: a bit
    flipped in a due time would otherwise move an entry out of its bucket unseen."""
    bad = [
        number
        for number, (body, checksum) in enumerate(_SPLIT.iter_unpack(data))
        if _xxh3(body) != checksum
    ]
    bad.extend(number for number, (kind,) in enumerate(_KIND.iter_unpack(data)) if not 0 < kind < 3)
    if bad:
        number = min(bad)
        raise CorruptTimerIndex(
            f"{where}: entry {number} at byte {number * ENTRY_SIZE} fails its checksum; it was "
            "flushed, so this is damage, not a torn tail"
        )


def entries(
    data: bytes, where: str, bucket: int | None = None, bucket_ms: int = 1
) -> Iterator[tuple[int, TimerBatch]]:
    """(kind, batch) of each entry of `data` (checked first: `check_entries`), only those of
    `bucket` if given."""
    check_entries(data, where)
    for kind, count, due_ms, offset, _ in _WHOLE.iter_unpack(data):
        if bucket is None or due_ms // bucket_ms == bucket:
            yield kind, TimerBatch(due_ms, offset, count)


def entries_of(
    data: bytes, where: str, buckets: Collection[int], bucket_ms: int
) -> Iterator[tuple[int, int, TimerBatch]]:
    """(kind, bucket, batch) of each entry of `data` in one of `buckets` (all of `data`
    checked first, once: `check_entries`)."""
    check_entries(data, where)
    for kind, count, due_ms, offset, _ in _WHOLE.iter_unpack(data):
        bucket = due_ms // bucket_ms
        if bucket in buckets:
            yield kind, bucket, TimerBatch(due_ms, offset, count)


def group_by_bucket(data: bytes, bucket_ms: int) -> dict[int, list[int]]:
    """bucket -> the byte positions of its entries in `data`, in order (entries unchecked)."""
    groups: dict[int, list[int]] = {}
    for number, (due_ms,) in enumerate(_DUE.iter_unpack(data)):
        bucket = due_ms // bucket_ms
        positions = groups.get(bucket)
        if positions is None:
            groups[bucket] = [number * ENTRY_SIZE]
        else:
            positions.append(number * ENTRY_SIZE)
    return groups


@dataclass(slots=True)
class BucketState:
    records: int = 0  # pending records
    batches: int = 0  # pending batches
    file_bytes: int = 0  # bytes of its bucket file
    min_offset: int = -1  # the lowest pending offset or a lower bound of it; -1: none


@dataclass(frozen=True, slots=True)
class IndexState:
    """What the state file holds: the index's commit point."""

    bucket_ms: int
    applied_offset: int
    added_through: int  # the highest offset added (-1: none)
    last_plan: Plan | None
    journal_bytes: int
    buckets: dict[int, BucketState]  # pending buckets only
    # the first timer-log offset the index folded: a record below it (a plan's batch, a
    # copy's original) is outside it (`storage.timer_index`); 0 in states written before it
    start_offset: int = 0
    last_plan_offset: int = -1  # where the last plan's record is in the log (-1: unknown)


def encode_state(state: IndexState) -> bytes:
    plan = state.last_plan
    body: bytes = msgpack.packb(
        {
            "version": VERSION,
            "bucket_ms": state.bucket_ms,
            "applied": state.applied_offset,
            "added_through": state.added_through,
            "plan": None
            if plan is None
            else [
                plan.sequence,
                [[b.due_ms, b.offset, b.record_count] for b in plan.batches],
                plan.epoch,
                plan.made_ms,
                plan.carried,
            ],
            "journal_bytes": state.journal_bytes,
            "start": state.start_offset,
            "plan_at": state.last_plan_offset,
            "buckets": [
                [b, s.records, s.batches, s.file_bytes, s.min_offset]
                for b, s in state.buckets.items()
            ],
        }
    )
    return _PREFIX.pack(len(body), _xxh3(body)) + body


def decode_state(data: bytes, where: str) -> IndexState:
    try:
        length, checksum = _PREFIX.unpack_from(data, 0)
        body = data[_PREFIX.size : _PREFIX.size + length]
        if len(body) != length or _xxh3(body) != checksum:
            raise ValueError("checksum mismatch or short body")
        fields: dict[str, Any] = msgpack.unpackb(body, strict_map_key=False)
        if fields["version"] != VERSION:
            raise ValueError(f"version {fields['version']}, this code reads {VERSION}")
        plan = fields["plan"]
        return IndexState(
            bucket_ms=fields["bucket_ms"],
            applied_offset=fields["applied"],
            added_through=fields["added_through"],
            last_plan=None
            if plan is None
            # (no `carried` in a state written before two plans outstanding: 0)
            else Plan(plan[0], tuple(TimerBatch(*b) for b in plan[1]), *plan[2:5]),
            journal_bytes=fields["journal_bytes"],
            buckets={b: BucketState(r, n, size, low) for b, r, n, size, low in fields["buckets"]},
            start_offset=fields.get("start", 0),
            last_plan_offset=fields.get("plan_at", -1),
        )
    except (struct.error, ValueError, TypeError, KeyError, msgpack.UnpackException) as error:
        raise CorruptTimerIndex(f"{where}: not a valid timer index state ({error})") from error


# -- file helpers: each opens, acts and closes (the index holds no descriptor) -------------------


def file_size(disk: Disk, path: str) -> int | None:
    """The size of `path`, or None if it does not exist."""
    try:
        fd = disk.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return disk.size(fd)
    finally:
        disk.close(fd)


def read_prefix(disk: Disk, path: str, size: int) -> bytes:
    """The first `size` bytes of `path` (flushed: a shorter file is `CorruptTimerIndex`)."""
    if not size:
        return b""
    fd = disk.open(path, os.O_RDONLY)
    try:
        data = disk.pread(fd, size, 0)
    finally:
        disk.close(fd)
    if len(data) < size:
        raise CorruptTimerIndex(f"{path}: {len(data)} bytes, {size} expected")
    return data


def truncate(disk: Disk, path: str, size: int) -> None:
    """Cuts `path` to `size` bytes, durably."""
    fd = disk.open(path, os.O_RDWR)
    try:
        disk.ftruncate(fd, size)
        disk.fsync(fd)
    finally:
        disk.close(fd)
