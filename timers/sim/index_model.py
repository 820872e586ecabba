"""An in-memory stand-in for one replica's timer index (`storage.timer_index`) with the same
surface and its crash contract: a crash keeps exactly what the last flush made durable. The
simulator runs on it by default (timers/ imports nothing of ours); tests/timers runs the same
simulation over the real index on a simulated disk (`IndexStore` is the seam)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from timers.types import Plan, Rolled, TimerBatch

__all__ = ["IndexLike", "IndexStore", "MemoryIndex", "MemoryIndexStore"]


class IndexLike(Protocol):
    """What the simulator uses of `storage.timer_index.TimerIndex`."""

    def add(self, batch: TimerBatch) -> None: ...
    def planned(self, plan: Plan, offset: int = -1) -> None: ...
    def rolled(self, roll: Rolled) -> None: ...
    def floor(self, offset: int) -> None: ...
    def buckets_below(self, offset: int) -> dict[int, int]: ...
    def flush(self, applied_offset: int) -> None: ...
    def summary(self) -> dict[int, tuple[int, int]]: ...
    def bucket(self, bucket: int) -> list[TimerBatch]: ...
    def min_pending_offset(self) -> int: ...

    @property
    def applied_offset(self) -> int: ...
    @property
    def last_plan(self) -> Plan | None: ...
    @property
    def pending(self) -> int: ...
    @property
    def last_plan_offset(self) -> int: ...


class IndexStore(Protocol):
    """One replica's index directory: `open` it (as of its last flush), `crash` it (lose what
    was not flushed; the open index is dead)."""

    def open(self, start_offset: int = 0) -> IndexLike: ...
    def crash(self) -> None: ...


@dataclass
class _Image:
    pending: dict[int, TimerBatch] = field(default_factory=dict)
    added_through: int = -1
    last_plan: Plan | None = None
    applied_offset: int = 0
    start_offset: int = 0
    flushed: bool = False
    last_plan_offset: int = -1


class MemoryIndex:
    def __init__(self, store: MemoryIndexStore, bucket_ms: int, start_offset: int = 0) -> None:
        durable = store.durable
        self._store = store
        self._bucket_ms = bucket_ms
        if not durable.flushed:  # a new index: it folds the log from its first offset
            durable = _Image(added_through=start_offset - 1, applied_offset=start_offset)
            durable.start_offset = start_offset
            store.durable = durable  # (what a crash before its first flush leaves: nothing)
        self._image = _Image(
            dict(durable.pending),
            durable.added_through,
            durable.last_plan,
            durable.applied_offset,
            durable.start_offset,
            last_plan_offset=durable.last_plan_offset,
        )

    def add(self, batch: TimerBatch) -> None:
        if batch.offset <= self._image.added_through:
            return
        self._image.pending[batch.offset] = batch
        self._image.added_through = batch.offset

    def planned(self, plan: Plan, offset: int = -1) -> None:
        last = self._image.last_plan
        if last is not None and plan.start < last.after:
            return
        for batch in plan.own:
            self._image.pending.pop(batch.offset, None)
        self._image.last_plan = plan
        self._image.last_plan_offset = offset

    def rolled(self, roll: Rolled) -> None:
        copy = roll.batch
        if copy.offset <= self._image.added_through:
            return
        self._image.added_through = copy.offset
        outside = roll.from_offset < self._image.start_offset  # its original: not in here
        if self._image.pending.pop(roll.from_offset, None) is not None or outside:
            self._image.pending[copy.offset] = copy  # else: a dead copy

    def floor(self, offset: int) -> None:
        pass  # this model knows every pending offset exactly

    def buckets_below(self, offset: int) -> dict[int, int]:
        out: dict[int, int] = {}
        for batch in self._image.pending.values():
            bucket = batch.due_ms // self._bucket_ms
            if batch.offset < offset and batch.offset < out.get(bucket, offset):
                out[bucket] = batch.offset
        return out

    def flush(self, applied_offset: int) -> None:
        image = self._image
        if applied_offset < image.applied_offset:
            raise ValueError(f"applied offset {applied_offset} < {image.applied_offset}")
        image.applied_offset = applied_offset
        self._store.durable = _Image(
            dict(image.pending),
            image.added_through,
            image.last_plan,
            applied_offset,
            image.start_offset,
            flushed=True,
            last_plan_offset=image.last_plan_offset,
        )

    def summary(self) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for batch in self._image.pending.values():
            records, batches = out.get(batch.due_ms // self._bucket_ms, (0, 0))
            out[batch.due_ms // self._bucket_ms] = (records + batch.record_count, batches + 1)
        return out

    def bucket(self, bucket: int) -> list[TimerBatch]:
        return sorted(
            b for b in self._image.pending.values() if b.due_ms // self._bucket_ms == bucket
        )

    def min_pending_offset(self) -> int:
        offsets = list(self._image.pending)
        if self._image.last_plan is not None:
            offsets.extend(b.offset for b in self._image.last_plan.batches)
        if self._image.last_plan_offset >= 0:
            offsets.append(self._image.last_plan_offset)
        return min([*offsets, self._store.durable.applied_offset])

    @property
    def applied_offset(self) -> int:
        return self._image.applied_offset

    @property
    def last_plan(self) -> Plan | None:
        return self._image.last_plan

    @property
    def last_plan_offset(self) -> int:
        return self._image.last_plan_offset

    @property
    def pending(self) -> int:
        return sum(b.record_count for b in self._image.pending.values())


class MemoryIndexStore:
    def __init__(self, bucket_ms: int) -> None:
        self.bucket_ms = bucket_ms
        self.durable = _Image()

    def open(self, start_offset: int = 0) -> MemoryIndex:
        return MemoryIndex(self, self.bucket_ms, start_offset)

    def crash(self) -> None:
        pass  # the durable image is what survives
