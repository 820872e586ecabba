"""What a timer log holds (DESIGN-26 "Where pending timers live"), read and written per batch.

A timer log (partition p of `timers.timer_topic(uid)`) holds two kinds of batches, told apart by
the headers of their first record (the node unpacks that record only, never the rest):

- a *timer batch*: a producer's delayed batch, stored unchanged; its due time is the first
  record's `flotilla-deliver-at` header (epoch ms, ASCII decimal; the SDK puts the same value on
  every record of the batch);
- a *plan record*: one record with the header `flotilla-timer-plan`, value = msgpack
  `[sequence, [[due_ms, offset, record_count], ...], epoch, made_ms, carried]` (records from
  before fire-producer epochs end after the list: epoch 0, made_ms 0; from before two plans
  outstanding, after made_ms: carried 0), appended by the timer partition's leader before it
  fires the plan's batches (`cluster.timers`);
- a *copy* rolled forward (`cluster.timer_roll`): one record with the headers
  `flotilla-timer-rolled` (the original's offset) and `flotilla-deliver-at`, value = the
  producer's batch as the original stored it (bytes moved, never re-encoded; a copy of a copy
  wraps the producer's batch, not the copy). It supersedes its original (`timers.types`);
- a *floor record*: one record with the header `flotilla-timer-floor` (an offset): no pending
  timer lies below it any more.

Anything else (a batch no node of this version wrote) is skipped with a warning by the index,
never fired: `classify` returns None for it.

`Follower` keeps, on every replica of a timer partition, the on-disk index of its committed log
(`storage.timer_index`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import msgpack

from cluster.errors import ClusterError
from cluster.failstop import NodeFailStopped
from cluster.replica import Replica
from proto.records import BATCH_HEADER_SIZE, InvalidBatch, encode_batch, peek_record_count
from storage import LogClosed
from storage.timer_index import INDEX_DIRECTORY, TimerIndex
from timers.types import (
    DELIVER_AT_HEADER,
    FLOOR_HEADER,
    PLAN_HEADER,
    ROLLED_HEADER,
    Floor,
    Plan,
    Rolled,
    TimerBatch,
    TimerConfig,
)

__all__ = [
    "Follower",
    "TimerLogError",
    "classify",
    "copy_batch",
    "decode_plan",
    "deliver_at_of",
    "fired_bytes",
    "floor_batch",
    "open_index",
    "plan_batch",
]

log = logging.getLogger("flotilla.timers")

READ_BYTES = 4 * 1024 * 1024
READ_RECORDS = 100_000
RETRY_S = 1.0  # a follower that failed is built again after this long
FLUSH_S = 1.0  # a replica's timer index is fsynced at most this often (and on a clean stop)

TimerItem = TimerBatch | Plan | Rolled | Floor
Item = tuple[TimerItem | None, int]  # (what a batch is, the offset past it)


class TimerLogError(ClusterError, InvalidBatch):
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
    rows = [[b.due_ms, b.offset, b.record_count] for b in plan.batches]
    fields = [plan.sequence, rows, plan.epoch, plan.made_ms]
    value = msgpack.packb([*fields, plan.carried] if plan.carried else fields)
    return encode_batch([(None, value, [(PLAN_HEADER, b"1")], timestamp_ms)])


def copy_batch(producer_batch: bytes, from_offset: int, due_ms: int, timestamp_ms: int) -> bytes:
    """A copy rolled forward of the timer batch at `from_offset` (`producer_batch`: the
    producer's batch, `fired_bytes` of what the log stores there)."""
    headers = [
        (ROLLED_HEADER, str(from_offset).encode()),
        (DELIVER_AT_HEADER, str(due_ms).encode()),
    ]
    return encode_batch([(None, producer_batch, headers, timestamp_ms)])


def floor_batch(offset: int, timestamp_ms: int) -> bytes:
    """The floor record: no pending timer lies below `offset` any more."""
    return encode_batch([(None, b"", [(FLOOR_HEADER, str(offset).encode())], timestamp_ms)])


def fired_bytes(stored: bytes) -> bytes:
    """What firing appends of a timer batch the log stores: the batch itself, or for a copy
    rolled forward the producer's batch it wraps (its first record's value)."""
    record = _first_record(stored)
    if _header(record, ROLLED_HEADER) is None:
        return stored
    value = record[1]
    if not isinstance(value, bytes):
        raise TimerLogError("a copy rolled forward whose value is not a batch")
    return value


def decode_plan(value: bytes) -> Plan:
    try:
        # [sequence, rows] in records from before epochs: epoch 0, made_ms 0 (unknown); no
        # `carried` in records from before two plans outstanding (and in those carrying none)
        fields = msgpack.unpackb(value, raw=False)
        if not isinstance(fields, list) or len(fields) not in (2, 4, 5):
            raise ValueError(f"{fields!r:.80} is not a list of 2, 4 or 5 fields")
        sequence, rows, epoch, made_ms, carried = (*fields, 0, 0, 0)[:5]
        if sequence < 0 or epoch < 0 or made_ms < 0 or not 0 <= carried <= len(rows):
            raise ValueError(
                f"sequence {sequence}, epoch {epoch}, made at {made_ms} ms, {carried} of "
                f"{len(rows)} batches carried"
            )
        return Plan(
            int(sequence),
            tuple(TimerBatch(int(due), int(offset), int(count)) for due, offset, count in rows),
            int(epoch),
            int(made_ms),
            int(carried),
        )
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise TimerLogError(
            "a plan record that is not [sequence, [[due, offset, count]], epoch, made_ms, "
            "carried] (each >= 0, carried at most the batches; carried, or epoch, made_ms and "
            f"carried, may be left out): {error}"
        ) from None


def classify(batch: bytes | memoryview, base_offset: int, record_count: int) -> TimerItem | None:
    """A committed timer-log batch at `base_offset`: a timer batch, a plan, a copy rolled
    forward, a floor, or None (none of them)."""
    record = _first_record(batch)
    if _header(record, PLAN_HEADER) is not None:
        value = record[1]
        return decode_plan(value) if isinstance(value, bytes) else None
    floor = _epoch_ms(_header(record, FLOOR_HEADER))  # (an offset: the same ASCII decimal)
    if floor is not None:
        return Floor(floor)
    due_ms = _epoch_ms(_header(record, DELIVER_AT_HEADER))
    if due_ms is None:
        return None
    rolled_from = _epoch_ms(_header(record, ROLLED_HEADER))
    if rolled_from is not None:
        value = record[1]
        if not isinstance(value, bytes) or len(value) < BATCH_HEADER_SIZE:
            raise TimerLogError("a copy rolled forward whose value is not a batch")
        count = peek_record_count(value)
        return Rolled(TimerBatch(due_ms, base_offset, count), rolled_from)
    return TimerBatch(due_ms, base_offset, record_count)


def _read_items(replica: Replica, offset: int) -> list[Item]:
    """Reader thread: the committed batches of a timer log from `offset`, classified."""
    items: list[Item] = []
    for stored in replica.read_committed(offset, READ_RECORDS, READ_BYTES):
        end = stored.base_offset + stored.record_count
        try:
            item = classify(stored.data, stored.base_offset, stored.record_count)
        except ValueError as error:  # not a batch this version wrote: never fired
            log.warning("%s@%d is not a timer batch: %s", replica.group, stored.base_offset, error)
            item = None
        items.append((item, end))
    return items


def open_index(directory: str, bucket_ms: int, first_offset: int) -> TimerIndex:
    """Storage thread: the replica's timer index; a new one if it has none, or if its log now
    starts past what the index folded (the replica was reset to its leader's log start, or
    rebuilt): that index misses what went, and a new one folds the log from `first_offset`
    (`storage.timer_index`: every pending timer lies there or later)."""
    index = TimerIndex.open(directory, bucket_ms, start_offset=first_offset)
    if index.applied_offset >= first_offset:
        return index
    index.close()
    log.warning("the timer index %s folded the log up to offset %d; the log now starts at %d: "
                "a new index folds it from there", directory, index.applied_offset,
                first_offset)  # fmt: skip
    shutil.rmtree(directory, ignore_errors=True)
    return TimerIndex.open(directory, bucket_ms, start_offset=first_offset)


class Follower:
    """Keeps one replica's on-disk index of its committed timer log (`storage.timer_index`):
    every replica of a timer partition. After a restart it replays the log from the index's
    `applied_offset` (only the tail), never the whole log."""

    def __init__(self, replica: Replica, config: TimerConfig) -> None:
        self.replica = replica
        self.config = config
        self.index: TimerIndex | None = None  # once opened
        self.applied_offset = 0  # every record below is in the index (flushed or not)
        self.folded = asyncio.Event()  # set (and replaced) after each step
        self.on_item: Callable[[TimerItem], None] | None = None  # the slot's
        self._flushed_at = 0.0
        self._flushed_offset = -1
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        self._task.cancel()

    @property
    def done(self) -> bool:
        """Stopped (a failure, logged): the host builds it again."""
        return self._task.done()

    async def shut(self) -> None:
        """Stops following; flushes the index (the node stops gracefully)."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        index = self.index
        if index is not None and index.failed is None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(index.flush, self.applied_offset)
            index.close()

    @property
    def pending(self) -> int:
        return self.index.pending if self.index is not None else 0

    def keep_offset(self) -> int | None:
        """The lowest offset of the log still needed (None: not known yet): the lowest pending
        timer's or the last plan's lowest batch, and never above what the index has flushed
        (a restart replays the log from there)."""
        index = self.index
        return None if index is None else index.min_pending_offset()

    async def caught_up(self, offset: int) -> None:
        """Returns once the index is open and holds every record below `offset`."""
        while self.index is None or self.applied_offset < offset:
            await self.folded.wait()

    async def _run(self) -> None:
        replica = self.replica
        try:
            index = await self._open()
            while True:
                changed = replica.hw_changed
                if replica.segmented.first_offset > self.applied_offset:
                    # reset to its leader's log start past what the index folded: the index
                    # misses what went; a new one folds the log from where it starts now
                    index.close()
                    index = await self._open()
                if self.applied_offset < replica.high_watermark:
                    items = await asyncio.to_thread(_read_items, replica, self.applied_offset)
                    for item, end in items:
                        if isinstance(item, TimerBatch):
                            index.add(item)
                        elif isinstance(item, Plan):
                            index.planned(item, end - 1)  # (a plan record is one record)
                        elif isinstance(item, Rolled):
                            index.rolled(item)
                        elif isinstance(item, Floor):
                            index.floor(item.offset)
                        self.applied_offset = max(self.applied_offset, end)
                        if item is not None and self.on_item is not None:
                            self.on_item(item)
                    event, self.folded = self.folded, asyncio.Event()
                    event.set()
                    await self._flush(index)
                    if items:
                        continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), FLUSH_S)
                await self._flush(index)
        except (asyncio.CancelledError, LogClosed, NodeFailStopped):
            return
        except Exception:
            log.exception("indexing the timer log %s failed; retrying in %.0f s", replica.group,
                          RETRY_S)  # fmt: skip
            if self.index is not None:
                self.index.close()
            await asyncio.sleep(RETRY_S)  # then the host builds it again

    async def _open(self) -> TimerIndex:
        directory = os.path.join(self.replica.directory, INDEX_DIRECTORY)
        first = self.replica.segmented.first_offset
        index = await asyncio.to_thread(open_index, directory, self.config.bucket_ms, first)
        self.index = index
        self.applied_offset = self._flushed_offset = index.applied_offset
        event, self.folded = self.folded, asyncio.Event()
        event.set()  # open: a `caught_up` with nothing to fold may return
        return index

    async def _flush(self, index: TimerIndex) -> None:
        """At most every FLUSH_S, off the event loop."""
        now = time.monotonic()
        if self.applied_offset == self._flushed_offset or now - self._flushed_at < FLUSH_S:
            return
        self._flushed_at = now
        offset = self.applied_offset
        await asyncio.to_thread(index.flush, offset)
        self._flushed_offset = offset
