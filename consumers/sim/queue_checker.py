"""The promises of queue groups (ISSUE-25), checked as the queue simulation runs.

The checker folds the committed entries of the `__groups` log itself (in log order, each with
the time the coordinator decided it) and watches the dead-letter topic and the members; it never
asks the coordinator what it thinks.

- exactly once: a record is acked at most once (a committed ack), copied to the dead-letter
  topic at most once (after the topic's (producer id, sequence) dedupe), never both; and once
  the run drained, every produced record is one or the other ("never neither").
- one holder: a record is leased to a member only when no other lease of it is live: every
  earlier lease ended (settled, expired, released, its member gone) or is past its deadline.
  A lease expires (a tick's entry) only at or after its deadline, unless its member departed.
  A member that holds a lease (its grant committed) and settles it before the deadline, while
  still in the group, is never told it was lost; one settled at or past its deadline is never
  applied.
- delivery_count: each hand-out of a record has the previous hand-out's count + 1 (1 first):
  it never decreases, also across failovers.
- window: next_offset - acked_floor <= max_in_flight in every partition, at every step.
- dead letters: a copy only for a record rejected or handed out max_deliveries times; each
  dead-letter producer's sequences arrive contiguous from 0 (a gap would be refused).
- key ordering: a record is handed out only when every earlier record with its key is settled.
- retention: a record below the log start is handed out no more; one neither acked nor
  dead-lettered counts as deleted (the third outcome) only if retention deleted it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumers.entries import (
    Entry,
    MemberRemoved,
    QueueDeadLettered,
    QueueLeased,
    QueueSettled,
)
from consumers.queue_types import REASON_REJECTED, DeadLetterJob
from consumers.sim.checker import Violation

__all__ = ["QUEUE_VIOLATIONS", "QueueChecker"]

QUEUE_VIOLATIONS = (
    "acked-twice",
    "dead-lettered-twice",
    "acked-and-dead-lettered",
    "lost-record",
    "leased-twice",
    "expired-before-deadline",
    "lease-lost-early",
    "late-settle-applied",
    "delivery-count",
    "window",
    "dead-letter-early",
    "dead-letter-sequence-gap",
    "key-order",
    "leased-deleted",
    "placeholder",
)

Record = tuple[int, int]  # (partition, offset)


@dataclass(slots=True)
class _Lease:
    member_id: str
    count: int
    deadline_ms: int
    live: bool = True


class QueueChecker:
    def __init__(self, max_deliveries: int) -> None:
        self.max_deliveries = max_deliveries
        self.leases: dict[Record, _Lease] = {}
        self.counts: dict[Record, int] = {}
        self.acked: set[Record] = set()
        self.copied: dict[Record, int] = {}  # -> how many copies landed
        self.removed: set[str] = set()  # members the committed log removed
        self.keys: dict[Record, bytes | None] = {}
        self.unsettled_by_key: dict[tuple[int, bytes], set[int]] = {}
        self.last_sequence: dict[tuple[int, int], int] = {}  # (dlq partition, producer) -> seq
        self.log_starts: dict[int, int] = {}  # partition -> retention's log start

    # -- what the producers wrote ----------------------------------------------------------------
    def produced(self, record: Record, key: bytes | None) -> None:
        self.keys[record] = key
        if key is not None:
            self.unsettled_by_key.setdefault((record[0], key), set()).add(record[1])

    # -- the committed log -----------------------------------------------------------------------
    def committed(self, entries: Iterable[Entry], decided_at_ms: int, from_tick: bool) -> None:
        entries = list(entries)
        departing = {e.member_id for e in entries if isinstance(e, MemberRemoved)}
        for entry in entries:
            if isinstance(entry, QueueLeased):
                self._leased(entry, decided_at_ms)
            elif isinstance(entry, QueueSettled):
                self._settled(entry, decided_at_ms, departing if from_tick else None)
            elif isinstance(entry, QueueDeadLettered):
                for offset in entry.offsets:
                    self._end((entry.partition, offset))
                    self._settle_key((entry.partition, offset))
            elif isinstance(entry, MemberRemoved):
                self.removed.add(entry.member_id)
                for lease in self.leases.values():
                    if lease.member_id == entry.member_id:
                        lease.live = False

    def _leased(self, entry: QueueLeased, now_ms: int) -> None:
        for offset, count, _ in entry.leases:
            record = (entry.partition, offset)
            if offset < entry.log_start:
                raise Violation(
                    "leased-deleted",
                    f"{record} handed out below the log start {entry.log_start} it was given",
                )
            before = self.leases.get(record)
            if before is not None and before.live and now_ms < before.deadline_ms:
                raise Violation(
                    "leased-twice",
                    f"{record} leased to {entry.member_id} at {now_ms} while {before.member_id}'s "
                    f"lease (count {before.count}) runs to {before.deadline_ms}",
                )
            previous = self.counts.get(record, 0)
            if count != previous + 1:
                raise Violation(
                    "delivery-count",
                    f"{record} handed out with delivery_count {count} after {previous}",
                )
            self.counts[record] = count
            key = self.keys.get(record)
            if key is not None:
                earlier = self.unsettled_by_key.get((entry.partition, key), set())
                if earlier and min(earlier) < offset:
                    raise Violation(
                        "key-order",
                        f"{record} (key {key!r}) handed out while {entry.partition}/"
                        f"{min(earlier)} with the same key is unsettled",
                    )
            self.leases[record] = _Lease(entry.member_id, count, entry.deadline_ms)

    def _settled(self, entry: QueueSettled, now_ms: int, tick: set[str] | None) -> None:
        p = entry.partition
        for offset in entry.acked:
            record = (p, offset)
            if record in self.acked:
                raise Violation("acked-twice", f"{record} acked a second time at {now_ms}")
            if record in self.copied:
                raise Violation("acked-and-dead-lettered", f"{record} acked after its DLQ copy")
            self.acked.add(record)
            self._end(record)
            self._settle_key(record)
        for offset, deadline in entry.extended:
            lease = self.leases.get((p, offset))
            if lease is not None:
                lease.deadline_ms = deadline  # now + invisible_ms: later or sooner
        returned = [w[0] for w in entry.waiting] + [d[0] for d in entry.dead]
        for offset in returned:
            record = (p, offset)
            lease = self.leases.get(record)
            if (
                tick is not None
                and lease is not None
                and lease.member_id not in tick
                and lease.live
                and now_ms < lease.deadline_ms
            ):
                raise Violation(
                    "expired-before-deadline",
                    f"{record}: {lease.member_id}'s lease to {lease.deadline_ms} expired at {now_ms}",
                )
            self._end(record)

    def _end(self, record: Record) -> None:
        lease = self.leases.get(record)
        if lease is not None:
            lease.live = False

    def _settle_key(self, record: Record) -> None:
        key = self.keys.get(record)
        if key is not None:
            self.unsettled_by_key.get((record[0], key), set()).discard(record[1])

    # -- the dead-letter topic -------------------------------------------------------------------
    def copy(self, job: DeadLetterJob, dlq_partition: int, placeholder: bool = False) -> bool:
        """A copy reaches the dead-letter partition: False if its dedupe drops it. A
        `placeholder` (the source was deleted by retention: headers only) keeps the producer's
        sequence contiguous and copies nothing."""
        key = (dlq_partition, job.producer_id)
        last = self.last_sequence.get(key, -1)
        if job.sequence <= last:
            return False
        if job.sequence != last + 1:
            raise Violation(
                "dead-letter-sequence-gap",
                f"producer {job.producer_id} sent sequence {job.sequence} after {last}",
            )
        self.last_sequence[key] = job.sequence
        record = (job.partition, job.offset)
        if job.reason != REASON_REJECTED and job.delivery_count < self.max_deliveries:
            raise Violation(
                "dead-letter-early",
                f"{record} dead-lettered ({job.reason}) after {job.delivery_count} deliveries",
            )
        if placeholder:
            if job.offset >= self.log_starts.get(job.partition, 0):
                raise Violation("placeholder", f"{record}: a placeholder for a readable record")
            return True
        if record in self.acked:
            raise Violation("acked-and-dead-lettered", f"{record} copied to the DLQ after its ack")
        self.copied[record] = self.copied.get(record, 0) + 1
        if self.copied[record] > 1:
            raise Violation(
                "dead-lettered-twice",
                f"{record} copied to the dead-letter topic {self.copied[record]} times",
            )
        return True

    # -- the members' side and the coordinator's window ------------------------------------------
    def settle_lost(self, member_id: str, record: Record, deadline_ms: int, now_ms: int) -> None:
        if member_id not in self.removed and now_ms < deadline_ms:
            raise Violation(
                "lease-lost-early",
                f"{member_id}'s lease of {record} (deadline {deadline_ms}) was lost at {now_ms}",
            )

    @staticmethod
    def settle_applied(member_id: str, record: Record, deadline_ms: int, now_ms: int) -> None:
        if now_ms >= deadline_ms:
            raise Violation(
                "late-settle-applied",
                f"{member_id} settled {record} at {now_ms}, past its lease's deadline "
                f"{deadline_ms}, and it was applied",
            )

    def window(self, partition: int, floor: int, next_offset: int, max_in_flight: int) -> None:
        """Fresh records go out only within the window: next_offset <= floor + max_in_flight,
        unless retention moved next_offset up to the log start (while an older lease holds the
        floor: then nothing fresh goes out until it ends)."""
        log_start = self.log_starts.get(partition, 0)
        if next_offset > max(floor + max_in_flight, log_start):
            raise Violation(
                "window",
                f"partition {partition}: next {next_offset} - floor {floor} > {max_in_flight} "
                f"(log start {log_start})",
            )

    def retention(self, partition: int, log_start: int) -> None:
        before = self.log_starts.get(partition, 0)
        self.log_starts[partition] = log_start
        for offset in range(before, log_start):  # deleted: no longer holds its key back
            self._settle_key((partition, offset))

    def _unsettled(self, produced: Iterable[Record]) -> list[Record]:
        return sorted(
            r
            for r in produced
            if r not in self.acked and r not in self.copied and r[1] >= self.log_starts.get(r[0], 0)
        )

    def all_settled(self) -> bool:
        return not self._unsettled(self.keys)

    def drained(self, produced: Iterable[Record]) -> None:
        missing = self._unsettled(produced)
        if missing:
            raise Violation(
                "lost-record",
                f"{len(missing)} record(s) neither acked nor dead-lettered after the drain: "
                f"{missing[:6]}",
            )
