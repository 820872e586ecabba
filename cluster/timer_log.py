"""What a timer log holds (DESIGN-26 "Where pending timers live"), read and written per batch.

A timer log (partition p of `timers.timer_topic(uid)`) holds two kinds of batches, told apart by
the headers of their first record (the node unpacks that record only, never the rest):

- a *timer batch*: a producer's delayed batch, stored unchanged; its due time is the first
  record's `flotilla-deliver-at` header (epoch ms, ASCII decimal; the SDK puts the same value on
  every record of the batch);
- a *plan record*: one record with the header `flotilla-timer-plan`, value = msgpack
  `[sequence, [[due_ms, offset, record_count], ...]]`, appended by the timer partition's leader
  before it fires the plan's batches (`cluster.timers`).

Anything else (a batch no node of this version wrote) is skipped with a warning by the index,
never fired: `classify` returns None for it.
"""

from __future__ import annotations

from typing import Any

import msgpack

from proto.records import BATCH_HEADER_SIZE, InvalidBatch, encode_batch
from timers.types import DELIVER_AT_HEADER, PLAN_HEADER, Plan, TimerBatch

__all__ = ["TimerLogError", "classify", "decode_plan", "deliver_at_of", "plan_batch"]


class TimerLogError(InvalidBatch):
    """A batch of a timer log (or one offered to it) that is not what its headers say."""


def _first_record(batch: bytes | memoryview) -> list[Any]:
    """The first record `[key, value, headers, delta]` of a checked batch, unpacking nothing
    more (O(size of that record))."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(memoryview(batch)[BATCH_HEADER_SIZE:])
    try:
        if unpacker.read_array_header() < 1:
            raise TimerLogError("a batch with no records")
        record = unpacker.unpack()
    except (ValueError, msgpack.UnpackException) as error:
        raise TimerLogError(f"batch body is not a list of records: {error}") from None
    if not isinstance(record, list) or len(record) != 4:
        raise TimerLogError("the first record is not [key, value, headers, timestamp_delta]")
    return record


def _header(record: list[Any], name: str) -> bytes | None:
    headers = record[2]
    for header in headers if isinstance(headers, list) else ():
        if isinstance(header, list) and len(header) == 2 and header[0] == name:
            data = header[1]
            return data if isinstance(data, bytes) else None
    return None


def _epoch_ms(data: bytes | None) -> int | None:
    if data is None or not data.isdigit() or len(data) > 18:
        return None
    return int(data)


def deliver_at_of(batch: bytes | memoryview) -> int | None:
    """The due time a (checked) batch's first record carries; None when it carries none, or
    one that is not an epoch ms in ASCII decimal."""
    return _epoch_ms(_header(_first_record(batch), DELIVER_AT_HEADER))


def plan_batch(plan: Plan, timestamp_ms: int) -> bytes:
    """The plan record's batch (no producer: a leader appends it once per plan it decides)."""
    value = msgpack.packb(
        [plan.sequence, [[b.due_ms, b.offset, b.record_count] for b in plan.batches]]
    )
    return encode_batch([(None, value, [(PLAN_HEADER, b"1")], timestamp_ms)])


def decode_plan(value: bytes) -> Plan:
    try:
        sequence, rows = msgpack.unpackb(value, raw=False)
        return Plan(
            int(sequence),
            tuple(TimerBatch(int(due), int(offset), int(count)) for due, offset, count in rows),
        )
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise TimerLogError(
            f"a plan record that is not [sequence, [[due, offset, count]]]: {error}"
        ) from None


def classify(
    batch: bytes | memoryview, base_offset: int, record_count: int
) -> TimerBatch | Plan | None:
    """A committed timer-log batch at `base_offset`: a timer batch, a plan, or None (neither)."""
    record = _first_record(batch)
    if _header(record, PLAN_HEADER) is not None:
        value = record[1]
        return decode_plan(value) if isinstance(value, bytes) else None
    due_ms = _epoch_ms(_header(record, DELIVER_AT_HEADER))
    if due_ms is None:
        return None
    return TimerBatch(due_ms, base_offset, record_count)
