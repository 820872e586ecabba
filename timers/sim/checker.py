"""The promises of delayed delivery, checked as the timer simulation runs.

- accepted once: a producer's batch (producer, sequence) is accepted into the timer log at most
  once (the timer partition's idempotence table) — "accepted-twice";
- exactly once: every accepted batch lands in the source partition once, after the source's
  (producer, sequence) dedupe — "fired-twice"; and by the end of the drain — "lost";
- never early: a plan names only batches due at its time ("planned-early") and a batch lands no
  earlier than its due time ("fired-early");
- in order: a plan's batches are in (due, offset) order and land in that order ("out-of-order");
- late by at most a bound: a batch lands within `late_bound_ms` of the latest of its due time,
  its acceptance (a retried batch may be accepted after its due time) and the moment the firing
  leader became ready (a failover's election is the allowance) — "late";
- counts: the leader's book and its index count exactly the pending records — "pending";
- memory: the book holds no batch beyond the near window — "memory";
- retention: no index lets the timer log go (`min_pending_offset`) past what it still needs: a
  pending timer, the last plan's batches, or its durable applied offset; no floor record claims
  a pending timer is gone; no replica needs a record the log has cut — "retention";
- one live copy: a timer rolled forward is one timer (its identity: the original's offset, the
  root of its copies); a copy is made only of a pending batch, a plan never names an original
  its copy superseded, and no book holds one — "both-live" (and if both landed: "fired-twice").

A failed check raises `Violation` (kind: the quoted name).
"""

from __future__ import annotations

from collections.abc import Callable

from timers.types import Plan, Rolled, TimerBatch, TimerConfig

__all__ = ["KINDS", "TimerChecker", "Violation"]

KINDS = (
    "accepted-twice",
    "fired-twice",
    "lost",
    "planned-early",
    "fired-early",
    "out-of-order",
    "late",
    "pending",
    "memory",
    "retention",
    "both-live",
)


class Violation(Exception):
    """A promise does not hold. `kind` is one of KINDS."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


class TimerChecker:
    def __init__(self, config: TimerConfig, late_bound_ms: int) -> None:
        self.config = config
        self.late_bound_ms = late_bound_ms
        self.accepted: dict[int, TimerBatch] = {}  # timer-log offset -> batch
        self.producers: dict[tuple[int, int], int] = {}  # (producer, sequence) -> offset
        self.pending: dict[int, TimerBatch] = {}  # accepted, not in a committed plan
        self.landed: dict[int, int] = {}  # offset -> when it landed
        self.accepted_at: dict[int, int] = {}  # offset -> when it committed
        self.max_lateness_ms = 0
        self._landing: tuple[Plan, int] | None = None  # the plan landing now, and its next batch
        self.root: dict[int, int] = {}  # copy offset -> the offset of the timer's first batch
        self.superseded: dict[int, int] = {}  # original offset -> its copy's offset
        self.last_plan_at = -1  # the offset of the last plan's record (its sequence)

    # -- the timer log (committed records, in order) -------------------------------------------
    def committed_batch(
        self, batch: TimerBatch, producer: int, sequence: int, now_ms: int = 0
    ) -> None:
        first = self.producers.setdefault((producer, sequence), batch.offset)
        if first != batch.offset:
            raise Violation(
                "accepted-twice",
                f"producer {producer} sequence {sequence} accepted at offsets {first} and "
                f"{batch.offset}",
            )
        self.accepted[batch.offset] = batch
        self.pending[batch.offset] = batch
        self.accepted_at[batch.offset] = now_ms

    def committed_roll(self, roll: Rolled) -> None:
        """A copy rolled forward committed: it supersedes its original, which must be pending."""
        copy, origin = roll.batch, roll.from_offset
        original = self.pending.get(origin)
        if original is None or (original.due_ms, original.record_count) != (
            copy.due_ms,
            copy.record_count,
        ):
            where = "superseded" if origin in self.superseded else "not pending (fired)"
            raise Violation(
                "both-live",
                f"a copy at offset {copy.offset} of offset {origin}, which is {where}: a copy "
                "is made only of a pending batch, or the timer is live twice",
            )
        del self.pending[origin]
        self.pending[copy.offset] = copy
        self.accepted[copy.offset] = copy
        self.accepted_at[copy.offset] = self.accepted_at[origin]
        self.root[copy.offset] = self.root.get(origin, origin)
        self.superseded[origin] = copy.offset

    def committed_floor(self, offset: int) -> None:
        """A floor record committed: no pending timer may lie below `offset`."""
        below = sorted(o for o in self.pending if o < offset)
        if below:
            raise Violation(
                "retention",
                f"a floor at offset {offset} lets the log go, yet offset {below[0]} is pending",
            )

    def both_live(self, what: str, holds: Callable[[int], bool]) -> None:
        """`what` (a book) holds no original its copy superseded."""
        for origin, copy in self.superseded.items():
            if holds(origin):
                raise Violation(
                    "both-live",
                    f"{what} holds offset {origin} beside its copy at offset {copy}: the "
                    "original and its copy are both pending",
                )

    def needed(self, what: str, offset: int, log_start: int) -> None:
        """`what` reads the record at `offset`, which the log must still hold."""
        if offset < log_start:
            raise Violation(
                "retention",
                f"{what} needs offset {offset}, yet the log was cut to start at {log_start}",
            )

    def committed_plan(self, plan: Plan, offset: int = -1) -> None:
        self.last_plan_at = offset
        for batch in plan.batches:
            self.pending.pop(batch.offset, None)

    def plan_made(self, plan: Plan, now_ms: int) -> None:
        """The leader appends `plan` at `now_ms`."""
        # (in order within what it plans: the batches it carries were planned before them)
        ordered = sorted(plan.own)
        if list(plan.own) != ordered:
            raise Violation(
                "out-of-order",
                f"plan {plan.sequence} lists {[(b.due_ms, b.offset) for b in plan.batches]}",
            )
        for batch in plan.batches:
            if batch.offset in self.superseded:
                raise Violation(
                    "both-live",
                    f"plan {plan.sequence} names offset {batch.offset}, superseded by its copy "
                    f"at offset {self.superseded[batch.offset]}",
                )
            if batch.due_ms > now_ms:
                raise Violation(
                    "planned-early",
                    f"plan {plan.sequence} at {now_ms} ms names offset {batch.offset}, due at "
                    f"{batch.due_ms} ms",
                )

    # -- the source partition --------------------------------------------------------------------
    def landed_batch(self, plan: Plan, index: int, now_ms: int, ready_at_ms: int) -> None:
        """Batch `index` of `plan` was appended to the source partition (not as a duplicate)."""
        batch = plan.batches[index]
        if batch.offset not in self.accepted:
            raise Violation("fired-twice", f"offset {batch.offset} landed, never accepted")
        timer = self.root.get(batch.offset, batch.offset)  # a copy is its original's timer
        if timer in self.landed:
            copy = f" (a copy of offset {timer})" if timer != batch.offset else ""
            raise Violation(
                "fired-twice",
                f"offset {batch.offset}{copy} (due {batch.due_ms} ms) landed at "
                f"{self.landed[timer]} ms and again at {now_ms} ms (plan {plan.sequence})",
            )
        if now_ms < batch.due_ms:
            raise Violation(
                "fired-early",
                f"offset {batch.offset} landed at {now_ms} ms, due at {batch.due_ms} ms",
            )
        if self._landing is not None and self._landing[0] == plan and index < self._landing[1]:
            raise Violation(
                "out-of-order",
                f"plan {plan.sequence}: batch {index} landed after batch {self._landing[1] - 1}",
            )
        lateness = now_ms - max(batch.due_ms, ready_at_ms, self.accepted_at[batch.offset])
        self.max_lateness_ms = max(self.max_lateness_ms, lateness)
        if lateness > self.late_bound_ms:
            raise Violation(
                "late",
                f"offset {batch.offset} due at {batch.due_ms} ms landed at {now_ms} ms, "
                f"{lateness} ms late (accepted at {self.accepted_at[batch.offset]} ms, the "
                f"leader ready at {ready_at_ms} ms; bound {self.late_bound_ms} ms)",
            )
        self.landed[timer] = now_ms
        self._landing = (plan, index + 1)

    # -- state -----------------------------------------------------------------------------------
    def counts(self, what: str, pending_records: int) -> None:
        """`what` (the leader's book, or its index) counts `pending_records` pending records."""
        expected = sum(b.record_count for b in self.pending.values())
        if pending_records != expected:
            raise Violation(
                "pending", f"{what} counts {pending_records} pending records, {expected} are"
            )

    def memory(self, loaded_batches: int, now_ms: int) -> None:
        """The book holds `loaded_batches`: at most the pending batches of the near window."""
        end = now_ms // self.config.bucket_ms + self.config.window_buckets
        near = sum(1 for b in self.pending.values() if b.due_ms // self.config.bucket_ms <= end)
        if loaded_batches > near:
            raise Violation(
                "memory",
                f"the book holds {loaded_batches} batches; only {near} pending are due before "
                f"the end of bucket {end} (the near window)",
            )

    def retention(
        self, what: str, min_pending_offset: int, applied_offset: int, last_plan: Plan | None
    ) -> None:
        """`what` (an index folded up to the commit point, flushed up to `applied_offset`)
        lets the log go below `min_pending_offset`."""
        needed = [*self.pending, applied_offset]
        if self.last_plan_at >= 0:
            needed.append(self.last_plan_at)  # an index started past it would not know it
        if last_plan is not None:
            needed.extend(b.offset for b in last_plan.batches)
        if min_pending_offset > min(needed):
            raise Violation(
                "retention",
                f"{what} lets the timer log go below offset {min_pending_offset}, yet offset "
                f"{min(needed)} is still needed (pending timers, the last plan, or the replay "
                f"from applied offset {applied_offset})",
            )

    def finish(self) -> None:
        """After the drain: every accepted batch landed."""
        missing = sorted(set(self.accepted) - set(self.root) - set(self.landed))
        if missing:
            first = self.accepted[missing[0]]
            raise Violation(
                "lost",
                f"{len(missing)} accepted batch(es) never landed, e.g. offset {first.offset} "
                f"due at {first.due_ms} ms",
            )
