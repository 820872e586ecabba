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
  pending timer, the last plan's batches, or its durable applied offset — "retention".

A failed check raises `Violation` (kind: the quoted name).
"""

from __future__ import annotations

from timers.types import Plan, TimerBatch, TimerConfig

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

    def committed_plan(self, plan: Plan) -> None:
        for batch in plan.batches:
            self.pending.pop(batch.offset, None)

    def plan_made(self, plan: Plan, now_ms: int) -> None:
        """The leader appends `plan` at `now_ms`."""
        ordered = sorted(plan.batches)
        if list(plan.batches) != ordered:
            raise Violation(
                "out-of-order",
                f"plan {plan.sequence} lists {[(b.due_ms, b.offset) for b in plan.batches]}",
            )
        for batch in plan.batches:
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
        if batch.offset in self.landed:
            raise Violation(
                "fired-twice",
                f"offset {batch.offset} (due {batch.due_ms} ms) landed at "
                f"{self.landed[batch.offset]} ms and again at {now_ms} ms (plan {plan.sequence})",
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
        self.landed[batch.offset] = now_ms
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
        missing = sorted(set(self.accepted) - set(self.landed))
        if missing:
            first = self.accepted[missing[0]]
            raise Violation(
                "lost",
                f"{len(missing)} accepted batch(es) never landed, e.g. offset {first.offset} "
                f"due at {first.due_ms} ms",
            )
