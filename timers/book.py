"""One timer partition's pending timers, as its leader (and each replica's index) folds them from
the timer log, and the leader's firing decisions. Pure: no I/O, no clock (`now_ms` comes in).

Memory is bounded by the near window: timers due before the end of bucket
`bucket(now) + window_buckets` are held in a heap by (due, offset); later ones are only counted
per bucket here, their entries waiting in the replica's on-disk index (`storage.timer_index`),
and `buckets_to_load(now)` names the buckets the node must read into the book (`load_bucket`)
as time moves on, ahead of their due times.

    book = TimerBook(config)
    book.restore(index.summary(), index.last_plan)     # after a restart / on leadership
    for b in buckets_to_load(now): book.load_bucket(b, index.bucket(b))
    then, in timer-log order as records commit:  book.accepted(batch) / book.planned(plan)
    leader: plan = book.next_plan(now_ms) -> append it (a plan record), then fire its batches;
            book.last_plan: the plan whose outcome a new leader does not know (fire it again)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from timers.faults import NO_FAULTS, TimerFaults
from timers.types import Plan, TimerBatch, TimerConfig

__all__ = ["DEFAULT_CONFIG", "BucketSummary", "TimerBook", "bucket_of"]

DEFAULT_CONFIG = TimerConfig()

# bucket -> (pending records, pending batches) of a bucket not loaded
BucketSummary = tuple[int, int]


def bucket_of(due_ms: int, bucket_ms: int) -> int:
    return due_ms // bucket_ms


class TimerBook:
    def __init__(self, config: TimerConfig = DEFAULT_CONFIG, *, faults: TimerFaults = NO_FAULTS):
        self.config = config
        self._faults = faults
        raise NotImplementedError

    def restore(self, summary: Mapping[int, BucketSummary], last_plan: Plan | None) -> None:
        """The index's per-bucket counts of pending timers and the last plan in the log: the
        state a new leader (or a restarted node) starts from, loading buckets afterwards."""
        raise NotImplementedError

    def buckets_to_load(self, now_ms: int) -> list[int]:
        """Buckets with pending timers, due before the end of the near window, not loaded yet
        (ascending). Empty when nothing is to be read."""
        raise NotImplementedError

    def load_bucket(self, bucket: int, batches: Iterable[TimerBatch]) -> None:
        """The pending timer batches of `bucket`, read from the index (fired ones left out)."""
        raise NotImplementedError

    def accepted(self, batch: TimerBatch) -> None:
        """A delayed batch committed in the timer log (in log order; any due time, also one in
        the past or in a bucket being loaded: never lost, never held twice)."""
        raise NotImplementedError

    def planned(self, plan: Plan) -> None:
        """A plan record committed in the timer log: its batches are fired (or being fired)."""
        raise NotImplementedError

    def next_plan(self, now_ms: int) -> Plan | None:
        """The leader's next plan: the pending timers due at `now_ms` or before, not planned,
        in (due, offset) order, at most max_plan_records / max_plan_batches (a batch larger than
        max_plan_records goes alone); its sequence follows the last plan's. None when nothing is
        due. Does not change the book: `planned` does, once the plan record committed."""
        raise NotImplementedError

    @property
    def last_plan(self) -> Plan | None:
        raise NotImplementedError

    def next_due_ms(self) -> int | None:
        """The earliest due time among loaded pending timers (None: none loaded)."""
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """Pending records (loaded and on disk)."""
        raise NotImplementedError
