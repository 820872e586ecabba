"""The simulation's retention (`timers.sim.world`): the leader's roll-forward rounds
(`timers.rolls`: copies of the pending timers below the retention point, the done marker again
if the last plan's record is to go, then a floor record), the log cut to what every replica's
index still needs, and a follower's index lost and folded again from the cut log."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable

from timers.rolls import roll_round
from timers.sim.checker import TimerChecker
from timers.sim.index_model import IndexStore
from timers.sim.parts import LogRecord
from timers.sim.state import Leader, Replica
from timers.types import TimerBatch, TimerConfig

__all__ = ["Retention"]


class Retention:
    """Mixed into `TimerSimulation`: what of it these steps use."""

    config: TimerConfig
    checker: TimerChecker
    rng: random.Random
    stats: dict[str, int]
    log: list[LogRecord]
    offsets: list[int]
    commit: int
    now: int
    replicas: list[Replica]
    leader: Leader | None
    roll_age_ms: int | None
    log_start: int
    floor_offset: int
    _make_store: Callable[[int], IndexStore]

    def _event(self, *parts: object) -> None:
        raise NotImplementedError

    def _next_offset(self) -> int:
        raise NotImplementedError

    def _offset_after(self, position: int) -> int:
        raise NotImplementedError

    def _append(self, record: LogRecord) -> None:
        raise NotImplementedError

    def _roll(self, leader: Leader) -> bool:
        """One roll round: copies of the pending timers below the retention point (the first
        committed record younger than `roll_age_ms`), then a floor record. False: nothing to
        do."""
        assert self.roll_age_ms is not None
        young = next(
            (r for r in self.log[: self.commit] if r.at_ms >= self.now - self.roll_age_ms), None
        )
        cut = young.offset if young is not None else self._offset_after(self.commit)
        index = self.replicas[leader.replica].index
        bounds = index.buckets_below(cut)
        read = sorted(bounds, key=lambda b: (bounds[b], b))[: self.config.max_roll_buckets]
        pending = [batch for bucket in read for batch in index.bucket(bucket)]
        unread = [bound for bucket, bound in bounds.items() if bucket not in read]
        chosen = roll_round(
            cut,
            pending,
            unread,
            self.config.max_roll_batches,
            due_after_ms=self.now + self.roll_age_ms,
        )
        plan_at = index.last_plan_offset
        marker = leader.book.remark() if 0 <= plan_at < cut else None
        if not chosen.copies and marker is None and chosen.floor <= self.floor_offset:
            return False
        for original in chosen.copies:
            self.checker.needed("a copy rolled forward", original.offset, self.log_start)
            offset = self._next_offset()
            copy = TimerBatch(original.due_ms, offset, original.record_count)
            self._append(LogRecord(offset, copy, None, rolled_from=original.offset, at_ms=self.now))
        if marker is not None:  # the last plan's record is to go: its sequence goes on here
            self.checker.plan_made(marker, self.now)
            self._append(LogRecord(self._next_offset(), None, marker, at_ms=self.now))
            self.stats["remarks"] += 1
        self._append(LogRecord(self._next_offset(), None, None, floor=chosen.floor, at_ms=self.now))
        leader.rolling = len(self.log) - 1
        self.stats["roll_rounds"] += 1
        self._event("roll", len(chosen.copies), chosen.floor)
        return True

    def _cut(self) -> None:
        """Each replica may drop what its index no longer needs; the simulation has one log,
        so it is cut to what every index still needs (and never past the commit point)."""
        needed = min(replica.index.min_pending_offset() for replica in self.replicas)
        cut = min(needed, self._offset_after(self.commit))
        if cut > self.log_start:
            self.stats["cut_records"] += cut - self.log_start
            self.log_start = cut
            self._event("cut", cut)

    def _rebuild_index(self, number: int) -> None:
        """A follower's index is lost (a rebuilt replica, or one reset to its leader's log
        start): a new one folds the log from where it now starts, references below it
        (plans' batches, copies' originals) outside it."""
        if self.leader is not None and self.leader.replica == number:
            return
        self.stats["index_rebuilds"] += 1
        store = self._make_store(number)
        self.replicas[number] = Replica(store, store.open(self.log_start))
        self.replicas[number].applied = bisect.bisect_left(
            self.offsets, self.log_start, 0, self.commit
        )
        self._event("index-rebuild", number, self.log_start)
