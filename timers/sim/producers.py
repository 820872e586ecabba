"""The simulation's producers (`timers.sim.world`): delayed batches accepted into the timer log
(the timer partition's idempotence table refuses a (producer, sequence) accepted already),
bursts due at one instant, past and far due times, and retries of batches whose acceptance was
lost with a leader's uncommitted tail or that were accepted already."""

from __future__ import annotations

import random

from timers.sim.parts import LogRecord
from timers.types import TimerBatch

__all__ = ["PRODUCERS", "Producers"]

PRODUCERS = 3


class Producers:
    """Mixed into `TimerSimulation`: what of it the producers use."""

    rng: random.Random
    stats: dict[str, int]
    log: list[LogRecord]
    commit: int
    now: int
    far_ms: int
    accepted_ids: set[tuple[int, int]]  # the timer log's idempotence table
    unacked: list[tuple[int, int, int, int]]  # (producer, sequence, due, count)
    producer_next: dict[int, int]

    def _next_offset(self) -> int:
        raise NotImplementedError

    def _append(self, record: LogRecord) -> None:
        raise NotImplementedError

    def _produce(self) -> None:
        rng = self.rng
        if self.unacked and rng.random() < 0.3:
            producer, sequence, due, count = self.unacked.pop(0)
            self.stats["producer_retries"] += 1
            self._accept(producer, sequence, due, count)
        if rng.random() < 0.05:  # a retry of a batch already accepted: the table refuses it
            accepted = [
                r for r in self.log[: self.commit] if r.batch is not None and r.rolled_from < 0
            ]
            if accepted:
                record = rng.choice(accepted)
                assert record.batch is not None
                self._accept(
                    record.producer, record.sequence, record.batch.due_ms, record.batch.record_count
                )
        burst = rng.random() < 0.04
        count = rng.randint(5, 15) if burst else (1 if rng.random() < 0.6 else 0)
        self.stats["bursts"] += burst
        due = self._due()
        for _ in range(count):
            producer = rng.randint(1, PRODUCERS)
            records = rng.randint(1, 5)
            sequence = self.producer_next[producer]
            self.producer_next[producer] += records
            self._accept(producer, sequence, due if burst else self._due(), records)

    def _due(self) -> int:
        rng, now = self.rng, self.now
        kind = rng.random()
        if kind < 0.1:
            self.stats["past_timers"] += 1
            return now - rng.randint(1, 999)
        if kind < 0.2:
            return now
        if kind < 0.7:
            return now + rng.randint(1, 15_000)
        self.stats["far_timers"] += 1
        return now + rng.randint(15_000, self.far_ms)

    def _accept(self, producer: int, sequence: int, due: int, count: int) -> None:
        if (producer, sequence) in self.accepted_ids:
            self.stats["refused_at_acceptance"] += 1
            return
        self.accepted_ids.add((producer, sequence))
        offset = self._next_offset()
        self._append(
            LogRecord(
                offset, TimerBatch(due, offset, count), None, producer, sequence, at_ms=self.now
            )
        )
        self.stats["batches"] += 1
        self.stats["records"] += count
