"""The simulation's model parts: a timer-log record, and the source partition's
idempotent-producer table (what decides whether a fired batch lands, is a duplicate, or is
refused as out of order)."""

from __future__ import annotations

from dataclasses import dataclass

from timers.types import Plan, TimerBatch

__all__ = ["FORGET_AFTER_MS", "LogRecord", "SourcePartition"]

FORGET_AFTER_MS = 20_000  # scaled: "a day" without a batch, and the source forgets a producer


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    batch: TimerBatch | None  # a timer batch, or
    plan: Plan | None  # a plan record
    producer: int = 0
    sequence: int = 0
    rolled_from: int = -1  # >= 0: `batch` is a copy of the batch at this offset (one record)
    floor: int = -1  # >= 0: a floor record (no pending timer below this offset)
    at_ms: int = 0  # when it was appended (a segment's age, for retention)

    @property
    def end(self) -> int:
        if self.batch is not None and self.rolled_from < 0:
            return self.offset + self.batch.record_count
        return self.offset + 1  # a plan, a copy (the original wrapped in one record), a floor


class SourcePartition:
    """The source partition's idempotent-producer table: per producer, the next sequence, and
    when it last appended; a producer idle for FORGET_AFTER_MS is forgotten (as a partition
    forgets one after a day without a batch), and then starts again at sequence 0."""

    def __init__(self) -> None:
        self.next: dict[tuple[int, int], int] = {}
        self.last_ms: dict[tuple[int, int], int] = {}
        self.forgotten = 0

    def append(self, producer: tuple[int, int], sequence: int, count: int, now_ms: int) -> str:
        if now_ms - self.last_ms.get(producer, now_ms) > FORGET_AFTER_MS:
            self.forgotten += self.next.pop(producer, None) is not None
        self.last_ms[producer] = now_ms
        expected = self.next.get(producer, 0)
        if sequence < expected:
            return "duplicate"
        if sequence > expected:
            return "out-of-order"
        self.next[producer] = sequence + count
        return "appended"
