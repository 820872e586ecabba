"""The simulation's firing (`timers.sim.world`): a plan's batches appended to the model source
partition as the fire producer, the way `cluster.timer_fire` and `cluster.copy_produce` do it.

Each batch is the fire producer of its plan's epoch (a plan made long after the last one starts
the next epoch at sequence 0: `timers.types`). Each batch goes through the copier (`Copier`, the model of `CopyProducer.copy`): a batch the
source answers as behind (SEQUENCE_BEHIND: below the producer's next sequence, older than the
batches it remembers) is written already and taken so; one refused as out of order ahead or
from a producer the source does not know goes once more under a producer derived from (fire
producer, sequence), at sequence 0, so a repeat of it is a duplicate there too.

A plan is first sent in a pipeline now and then (`PIPELINE_FAILS`): a prefix of its batches
lands, then the pipeline fails and every batch of the plan is sent again one by one through
the copier, from the first — as the node does when a pipelined append fails, and as a new
leader does with the last plan after a failover. A plan of more batches than the source
remembers per producer then reaches back past them: its first batches are answered behind.
When a pipeline fails on its caller's deadline (`IN_FLIGHT`), the batch it was waiting on is
still proposed at the source's leader: the one-by-one resend of that batch is refused as in
flight (SEQUENCE_IN_FLIGHT), and its first copy lands meanwhile. The copier sends it again,
never rebased (it would land twice), and is answered as a duplicate.
A pipeline that did not fail gives the answers the one-by-one path gives (it starts only at the
producer's next sequence, and lands each batch in order), so only the failing one is modelled.
"""

from __future__ import annotations

import random
from typing import Literal

from timers.faults import TimerFaults
from timers.sim.checker import TimerChecker
from timers.sim.parts import Answer, SourcePartition
from timers.sim.state import Leader

__all__ = ["FIRE_PRODUCER", "IN_FLIGHT", "PIPELINE_FAILS", "Copier", "Firing", "fire_producer"]

FIRE_PRODUCER = 7_000_001
PIPELINE_FAILS = 0.1  # a plan's pipeline fails part-way in this share of plans
IN_FLIGHT = 0.5  # of those, this share fail on a deadline with the next batch still proposed


def fire_producer(epoch: int) -> int:
    """The model's `cluster.timers.fire_producer_id`: one producer id per epoch."""
    return FIRE_PRODUCER + epoch


class Copier:
    """`cluster.copy_produce.CopyProducer.copy` in front of the model source partition."""

    def __init__(self, source: SourcePartition, faults: TimerFaults, stats: dict[str, int]):
        self.source = source
        self.faults = faults
        self.stats = stats

    def copy(
        self, sequence: int, count: int, now_ms: int, epoch: int = 0
    ) -> Literal["landed", "written"]:
        """Appends the batch of the fire producer of `epoch` at `sequence`: "landed" when this
        append wrote it, "written" when the source holds it already (a duplicate, or behind)."""
        producer = fire_producer(epoch)
        answer: Answer = self.source.append((producer, -1), sequence, count, now_ms)
        if answer == "behind":
            self.stats["behind_answers"] += 1
            if not self.faults.rebase_behind:
                return "written"
        if answer == "in-flight":
            # its first copy was still proposed: sent again (a duplicate now), never rebased
            self.stats["in_flight_answers"] += 1
            if not self.faults.rebase_in_flight:
                answer = self.source.append((producer, -1), sequence, count, now_ms)
                assert answer == "duplicate", answer
        if answer == "unknown":  # the source forgot the fire producer: one round trip lost
            self.stats["rebases_after_forget"] += 1
        if answer in ("behind", "out-of-order", "unknown", "in-flight"):
            self.stats["rebases"] += 1
            answer = self.source.append((producer, sequence), 0, count, now_ms)
            # the rebased producer only ever writes its one batch at sequence 0
            assert answer in ("appended", "duplicate"), answer
        return "landed" if answer == "appended" else "written"


class Firing:
    """Mixed into `TimerSimulation`: what of it firing uses."""

    rng: random.Random
    stats: dict[str, int]
    checker: TimerChecker
    copier: Copier
    log_start: int
    now: int

    def _event(self, *parts: object) -> None:
        raise NotImplementedError

    def _fire(self, leader: Leader, limit: int | None = None) -> None:
        """Fires the leader's plan from `leader.next_batch` (up to batch `limit`)."""
        plan = leader.firing
        assert plan is not None
        end = len(plan.batches) if limit is None else min(limit, len(plan.batches))
        if leader.next_batch == 0 and end > 1 and self.rng.random() < PIPELINE_FAILS:
            self._pipeline(leader, self.rng.randint(1, end - 1))
        for index in range(leader.next_batch, end):
            batch = plan.batches[index]
            self.checker.needed("the leader firing", batch.offset, self.log_start)
            outcome = self.copier.copy(
                self._sequence(leader, index), batch.record_count, self.now, plan.epoch
            )
            self._event("fire", batch.offset, outcome)
            self._landed_late(leader)  # a pipeline's copy that was still in flight
            if outcome == "landed":
                self.stats["landed"] += 1
                self.checker.landed_batch(plan, index, self.now, leader.ready_at_ms)
            else:
                self.stats["duplicates"] += 1
        leader.next_batch = end
        if end == len(plan.batches):  # the plan committed meanwhile (if any) is fired next
            leader.firing, leader.next_batch, leader.queued = leader.queued, 0, None

    def _pipeline(self, leader: Leader, batches: int) -> None:
        """The plan's first `batches` sent in a pipeline (never rebased: an append refused ends
        it), which then fails: the caller sends them all again one by one."""
        plan = leader.firing
        assert plan is not None
        self.stats["pipeline_failures"] += 1
        for index in range(batches):
            batch = plan.batches[index]
            answer = self.copier.source.append(
                (fire_producer(plan.epoch), -1),
                self._sequence(leader, index),
                batch.record_count,
                self.now,
            )
            self._event("pipeline", batch.offset, answer)
            if answer == "appended":
                self.stats["landed"] += 1
                self.checker.landed_batch(plan, index, self.now, leader.ready_at_ms)
            elif answer != "duplicate":
                return
        if batches < len(plan.batches) and self.rng.random() < IN_FLIGHT:
            # it failed on its deadline while the next batch was still proposed at the leader
            batch = plan.batches[batches]
            self.stats["in_flight_held"] += 1
            self.copier.source.hold(
                (fire_producer(plan.epoch), -1), self._sequence(leader, batches),
                batch.record_count, (plan, batches),
            )  # fmt: skip
            self._event("pipeline-held", batch.offset)

    def _landed_late(self, leader: Leader) -> None:
        """The held copies (`SourcePartition.hold`) that landed in the last append."""
        for token in self.copier.source.take_landed():
            assert isinstance(token, tuple)
            plan, index = token
            self._event("landed-late", plan.batches[index].offset)
            self.stats["landed"] += 1
            self.checker.landed_batch(plan, index, self.now, leader.ready_at_ms)

    @staticmethod
    def _sequence(leader: Leader, index: int) -> int:
        plan = leader.firing
        assert plan is not None
        return plan.sequence + sum(b.record_count for b in plan.batches[:index])
