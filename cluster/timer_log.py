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


class LogFold:
    """A timer partition's pending timers folded from its committed log on one replica: what the
    leader's `TimerBook` is restored and its buckets loaded from, what `pending_timers` counts
    and what retention keeps (`min_pending_offset`). Entries are keyed by offset: folding a
    batch twice (a replay) changes nothing.

    (Held in memory, a few hundred bytes a pending batch: the on-disk `storage.timer_index`
    takes its place, with hourly buckets and a restart that replays only the log's tail.)"""

    def __init__(self, bucket_ms: int) -> None:
        self.bucket_ms = bucket_ms
        self.applied_offset = 0  # the log is folded up to here (exclusive)
        self.last_plan: Plan | None = None
        self._pending: dict[int, TimerBatch] = {}  # offset -> batch
        self._buckets: dict[int, dict[int, TimerBatch]] = {}  # bucket -> offset -> batch
        self._records = 0

    def apply(self, item: TimerBatch | Plan | None, end_offset: int) -> None:
        """The item at the log's next batch, which ends at `end_offset`."""
        if isinstance(item, TimerBatch) and end_offset > self.applied_offset:
            if item.offset not in self._pending and not self._fired(item.offset):
                self._pending[item.offset] = item
                self._buckets.setdefault(item.due_ms // self.bucket_ms, {})[item.offset] = item
                self._records += item.record_count
        elif isinstance(item, Plan) and end_offset > self.applied_offset:
            for batch in item.batches:
                held = self._pending.pop(batch.offset, None)
                if held is not None:
                    self._records -= held.record_count
                    bucket = self._buckets[held.due_ms // self.bucket_ms]
                    del bucket[held.offset]
                    if not bucket:
                        del self._buckets[held.due_ms // self.bucket_ms]
            self.last_plan = item
        self.applied_offset = max(self.applied_offset, end_offset)

    def _fired(self, offset: int) -> bool:
        plan = self.last_plan
        return plan is not None and any(b.offset == offset for b in plan.batches)

    def summary(self) -> dict[int, tuple[int, int]]:
        """bucket -> (pending records, pending batches)."""
        return {
            bucket: (sum(b.record_count for b in batches.values()), len(batches))
            for bucket, batches in self._buckets.items()
        }

    def bucket(self, bucket: int) -> list[TimerBatch]:
        return sorted(self._buckets.get(bucket, {}).values())

    @property
    def pending(self) -> int:
        return self._records

    def min_pending_offset(self) -> int | None:
        return min(self._pending) if self._pending else None
