"""The simulation's model parts: a timer-log record, and the source partition's
idempotent-producer table (what decides whether a fired batch lands, is a duplicate, or is
refused: behind, out of order ahead, or from a producer it does not know)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from timers.types import Plan, TimerBatch

__all__ = ["FORGET_AFTER_MS", "SOURCE_WINDOW", "Answer", "LogRecord", "Producer", "SourcePartition"]

FORGET_AFTER_MS = 20_000  # scaled: "a day" without a batch, and the source forgets a producer
# scaled: the batches remembered per producer (`cluster.producers.WINDOW` is 8 beside plans of up
# to 256 batches; here 4 beside plans of up to `SIM_CONFIG.max_plan_batches` = 6), so that a plan
# fired again after a failover reaches back past them
SOURCE_WINDOW = 4

Producer = tuple[int, int]  # (producer id, the sequence it was rebased from; -1: not rebased)
Answer = Literal["duplicate", "appended", "behind", "out-of-order", "unknown", "in-flight"]


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
    """The source partition's idempotent-producer table, as `cluster.producers` and
    `cluster.idempotence` keep it: per producer only its last `window` batches (base sequence,
    record count) and when it last wrote. A producer idle for FORGET_AFTER_MS is forgotten (a
    partition forgets one after a day without a batch); a producer it does not know starts at
    sequence 0. The answers (`Answer`):

        duplicate     the batch at this base sequence is among the remembered ones
        appended      sequence == next (or an unknown producer at 0): written now
        behind        sequence < next, not remembered: written long ago (SEQUENCE_BEHIND)
        out-of-order  sequence > next: a gap ahead (an earlier batch is not written)
        unknown       an unknown producer at a sequence > 0 (UNKNOWN_PRODUCER_ID)
        in-flight     the batch's first copy is proposed, not appended yet (`hold`: a Produce
                      whose caller gave up on its deadline while the leader still had it), so
                      the repeat is refused, retriable (SEQUENCE_IN_FLIGHT); the first copy
                      lands right after that answer
    """

    def __init__(self, window: int = SOURCE_WINDOW) -> None:
        self.window = window
        self.batches: dict[
            Producer, tuple[tuple[int, int], ...]
        ] = {}  # (base, count), oldest first
        self.last_ms: dict[Producer, int] = {}
        self.forgotten = 0
        # (producer, base sequence) -> (record count, the caller's token): first copies
        # proposed, not appended yet
        self.held: dict[tuple[Producer, int], tuple[int, object]] = {}
        self.landed_late: list[object] = []  # the tokens of held copies landed since looked at

    def next_sequence(self, producer: Producer) -> int | None:
        batches = self.batches.get(producer)
        if not batches:
            return None
        base, count = batches[-1]
        return base + count

    def hold(self, producer: Producer, sequence: int, count: int, token: object) -> None:
        """A batch proposed to the leader and not appended yet: its Produce failed on the
        caller's deadline, and the batch lands when a batch of that producer at or after its
        sequence comes (its resend is answered in flight)."""
        self.held[(producer, sequence)] = (count, token)

    def take_landed(self) -> list[object]:
        """The tokens of the held copies that landed since the last call."""
        landed, self.landed_late = self.landed_late, []
        return landed

    def append(self, producer: Producer, sequence: int, count: int, now_ms: int) -> Answer:
        for key in sorted(k for k in self.held if k[0] == producer and k[1] <= sequence):
            # proposed before this batch came: appended first (the leader keeps their order)
            held_count, token = self.held.pop(key)
            held = self.append(producer, key[1], held_count, now_ms)
            assert held == "appended", held
            self.landed_late.append(token)
            if key[1] == sequence:
                return "in-flight"  # the answer was given while it was still proposed
        if producer in self.batches and now_ms - self.last_ms[producer] > FORGET_AFTER_MS:
            del self.batches[producer], self.last_ms[producer]
            self.forgotten += 1
        remembered = self.batches.get(producer, ())
        if any(base == sequence for base, _ in remembered):
            return "duplicate"
        expected = self.next_sequence(producer)
        if expected is None and sequence != 0:
            return "unknown"
        if expected is not None and sequence < expected:
            return "behind"
        if expected is not None and sequence > expected:
            return "out-of-order"
        self.batches[producer] = (*remembered, (sequence, count))[-self.window :]
        self.last_ms[producer] = now_ms  # only a batch written refreshes a producer
        return "appended"
