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
                                                  / book.rolled(roll) (a copy rolled forward)
    leader: plan = book.next_plan(now_ms) -> append it (a plan record), then fire its batches;
            once they all landed, if nothing else is due: book.done_marker() -> append it;
            book.last_plan: the plan whose outcome a new leader does not know (fire it again)
    a bucket read that failed: book.load_failed(b) (buckets_to_load names it again)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from timers.errors import InvalidTimer
from timers.faults import NO_FAULTS, TimerFaults
from timers.types import Plan, Rolled, TimerBatch, TimerConfig

__all__ = ["DEFAULT_CONFIG", "FAULT_EARLY_MS", "BucketSummary", "TimerBook", "bucket_of"]

DEFAULT_CONFIG = TimerConfig()
FAULT_EARLY_MS = 1_000  # TEST ONLY: how far ahead of its time `fire_early` plans a timer

# bucket -> (pending records, pending batches) of a bucket not loaded
BucketSummary = tuple[int, int]


def bucket_of(due_ms: int, bucket_ms: int) -> int:
    return due_ms // bucket_ms


class TimerBook:
    """Invariants (checked by tests/timers and the simulator):

        pending = sum(held record counts) + sum(records counted per unloaded bucket)
        a bucket is loaded (its pending batches all in the heap) or counted, never both
        every held batch's bucket <= the window's end when it was loaded, or it is due already

    A bucket may be read while records commit (the node reads the index off its event loop):
    from `buckets_to_load` until `load_bucket`, a batch accepted into it is held at once (the
    read may miss it) and an offset planned is remembered (the read may still return it), so
    the merge by offset neither loses nor repeats a timer.

    The heap deletes lazily: `_held` (offset -> batch) is the truth, a heap entry whose offset is
    not held (any more) is skipped and dropped when it reaches the top."""

    def __init__(self, config: TimerConfig = DEFAULT_CONFIG, *, faults: TimerFaults = NO_FAULTS):
        _validate(config)
        self.config = config
        self._faults = faults
        self._heap: list[TimerBatch] = []
        self._held: dict[int, TimerBatch] = {}  # offset -> batch: loaded pending batches
        self._held_records = 0
        self._loaded: dict[int, int] = {}  # loaded bucket -> its held batches (> 0)
        self._unloaded: dict[int, list[int]] = {}  # bucket -> [records, batches] on disk only
        self._unloaded_records = 0
        self._window_end: int | None = None  # the last bucket of the near window seen so far
        self._last_plan: Plan | None = None
        self._last_offsets: frozenset[int] = frozenset()  # the last plan's batches: fired
        self._after = (0, 0)  # (epoch, sequence) the next plan continues (`Plan.after`)
        self._skipped: set[int] = set()  # TEST ONLY (skip_far_bucket): buckets never loaded
        # buckets handed out by `buckets_to_load` and not loaded yet (the node is reading them),
        # and the offsets planned meanwhile (the read may still return them)
        self._loading: set[int] = set()
        self._planned_while_loading: set[int] = set()

    # -- state a leader starts from --------------------------------------------------------------
    def restore(self, summary: Mapping[int, BucketSummary], last_plan: Plan | None) -> None:
        """The index's per-bucket counts of pending timers and the last plan in the log: the
        state a new leader (or a restarted node) starts from, loading buckets afterwards."""
        for bucket, (records, batches) in summary.items():
            if records < 0 or batches < 0 or (batches == 0) != (records == 0):
                raise InvalidTimer(
                    f"bucket {bucket} summary ({records} records, {batches} batches): counts "
                    "must be >= 0 and zero together"
                )
        self._heap = []
        self._held = {}
        self._held_records = 0
        self._loaded = {}
        self._unloaded = {b: [r, n] for b, (r, n) in summary.items() if n > 0}
        self._unloaded_records = sum(r for r, _ in self._unloaded.values())
        self._skipped = set()
        self._loading = set()
        self._planned_while_loading = set()
        self._set_last_plan(last_plan)
        if self._faults.forget_last_plan:
            self._last_plan = None  # the bug: its outcome is not checked (its sequence is kept)

    def buckets_to_load(self, now_ms: int) -> list[int]:
        """Buckets with pending timers, due before the end of the near window, not loaded yet
        (ascending). Empty when nothing is to be read."""
        now_bucket = bucket_of(now_ms, self.config.bucket_ms)
        end = now_bucket + self.config.window_buckets
        if self._window_end is None or end > self._window_end:
            self._window_end = end
        due = sorted(b for b in self._unloaded if b <= self._window_end and b not in self._loading)
        if self._faults.skip_far_bucket:
            # the bug: a bucket read ahead of its time is dropped instead (its timers are lost)
            self._skipped.update(b for b in due if b > now_bucket)
            due = [b for b in due if b not in self._skipped]
        self._loading.update(due)
        return due

    def load_bucket(self, bucket: int, batches: Iterable[TimerBatch]) -> None:
        """The pending timer batches of `bucket`, read from the index (fired ones left out).
        A bucket neither counted nor being loaded is held already: a second load is ignored
        (a stale read could bring back timers fired since)."""
        batches = list(batches)
        for batch in batches:  # all checked first: bad input changes nothing
            if bucket_of(batch.due_ms, self.config.bucket_ms) != bucket:
                raise InvalidTimer(
                    f"batch at offset {batch.offset} is due at {batch.due_ms} ms, in bucket "
                    f"{bucket_of(batch.due_ms, self.config.bucket_ms)}, not in bucket {bucket}"
                )
        counted = self._unloaded.pop(bucket, None)
        if counted is None and bucket not in self._loading:
            return
        if counted is not None:
            self._unloaded_records -= counted[0]
        # fired already (the index may lag the book): the last plan's, or planned during the read
        fired = self._last_offsets | self._planned_while_loading
        self._loading.discard(bucket)
        if not self._loading:
            self._planned_while_loading = set()
        for batch in batches:
            if batch.offset not in fired:
                self._hold(batch)

    def load_failed(self, bucket: int) -> None:
        """The read of `bucket` (named by `buckets_to_load`) failed: `buckets_to_load` names it
        again. What was accepted into it meanwhile stays held (the next load merges by offset)."""
        self._loading.discard(bucket)
        if not self._loading:
            self._planned_while_loading = set()

    # -- the timer log, in order -----------------------------------------------------------------
    def accepted(self, batch: TimerBatch) -> None:
        """A delayed batch committed in the timer log (in log order; any due time, also one in
        the past or in a bucket being loaded: never lost, never held twice)."""
        if batch.record_count < 1:
            raise InvalidTimer(f"batch at offset {batch.offset}: {batch.record_count} records")
        if batch.offset in self._held or batch.offset in self._last_offsets:
            return  # a repeat (the log replayed): held already, or fired
        bucket = bucket_of(batch.due_ms, self.config.bucket_ms)
        counted = self._unloaded.get(bucket)
        if bucket in self._loading:
            # being read: the read may miss it, so it is held now (`load_bucket` merges by
            # offset); the bucket is in the near window, so memory stays bounded
            self._hold(batch)
        elif counted is not None:
            # on disk with its bucket: loading the bucket later gives it back
            counted[0] += batch.record_count
            counted[1] += 1
            self._unloaded_records += batch.record_count
        elif bucket in self._loaded or (
            self._window_end is not None and bucket <= self._window_end
        ):
            self._hold(batch)
        else:
            self._unloaded[bucket] = [batch.record_count, 1]
            self._unloaded_records += batch.record_count

    def planned(self, plan: Plan) -> None:
        """A plan record committed in the timer log: its batches are fired (or being fired)."""
        if plan.start < self._after:
            return  # a repeat of a plan already applied
        for i, batch in enumerate(plan.own):  # (carried ones: released with their own plan)
            if self._faults.fire_twice and i == 0:
                continue  # the bug: the batch stays pending, and is planned again
            self._release(batch.offset)
            if self._loading:
                self._planned_while_loading.add(batch.offset)
        self._drop_stale_top()
        self._set_last_plan(plan)

    def rolled(self, roll: Rolled) -> None:
        """A copy rolled forward committed in the timer log (`timers.types`: it supersedes its
        original). Held original: released, the copy held. Original in a bucket not loaded:
        the counts stay (same bucket, same records; the index swaps the two). Bucket being
        read: the copy is held now and the original counted out (the read may return either).
        Original not pending (its bucket loaded, it not held: fired, or superseded already;
        only a broken leader writes such a copy): the copy is dead, ignored. A repeat (the
        copy held already) is ignored."""
        copy, origin = roll.batch, roll.from_offset
        if copy.record_count < 1 or origin >= copy.offset:
            raise InvalidTimer(
                f"copy at offset {copy.offset} of offset {origin} with {copy.record_count} "
                "records: a copy follows its original and holds at least one record"
            )
        held = self._held.get(origin)
        if held is not None and (held.due_ms, held.record_count) != (
            copy.due_ms,
            copy.record_count,
        ):
            raise InvalidTimer(
                f"copy at offset {copy.offset} is due at {copy.due_ms} ms with "
                f"{copy.record_count} records; its original at {origin}, at {held.due_ms} ms "
                f"with {held.record_count}: a copy keeps both"
            )
        if copy.offset in self._held:
            return  # a repeat
        bucket = bucket_of(copy.due_ms, self.config.bucket_ms)
        if held is not None:
            if not self._faults.roll_keeps_original:
                self._release(origin)
            # (the bug: the original stays held beside its copy: both are planned)
            if self._loading:
                self._planned_while_loading.add(origin)
            self._hold(copy)
        elif bucket in self._loading:
            counted = self._unloaded.get(bucket)
            if counted is not None and counted[1] > 0:
                counted[0] -= copy.record_count
                counted[1] -= 1
                self._unloaded_records -= copy.record_count
            self._planned_while_loading.add(origin)  # the read may still return the original
            self._hold(copy)
        # else: counted on disk (the index swaps them), or not pending (a dead copy)

    def holds(self, offset: int) -> bool:
        """The batch at `offset` is held pending in memory (the near window)."""
        return offset in self._held

    def loaded_buckets(self) -> set[int]:
        """Buckets whose pending batches are all held (or being read into the book)."""
        return set(self._loaded) | self._loading

    # -- the leader ------------------------------------------------------------------------------
    def next_plan(self, now_ms: int, *, carry: bool = False) -> Plan | None:
        """The leader's next plan: the pending timers due at `now_ms` or before, not planned,
        in (due, offset) order, at most max_plan_records / max_plan_batches (a batch larger than
        max_plan_records goes alone); its sequence follows the last plan's, in its epoch, unless
        the last plan was made more than `fire_renew_ms` before `now_ms`: then the next epoch
        at sequence 0 (`timers.types`). None when nothing is due. Does not change the book: `planned` does, once the plan record committed.

        `carry`: the last plan is still being fired (two plans outstanding, `timers.types`):
        the plan lists the last plan's own batches first (`Plan.carried`), so that it names
        every batch whose outcome is unknown. None also when the plan would start a new epoch
        (it carries nothing: the caller waits for the last plan to fire in full first)."""
        cutoff = now_ms + (FAULT_EARLY_MS if self._faults.fire_early else 0)
        taken: list[TimerBatch] = []
        popped: list[TimerBatch] = []
        records = 0
        heap = self._heap
        while heap and len(taken) < self.config.max_plan_batches:
            top = heap[0]
            if self._held.get(top.offset) is not top:
                heapq.heappop(heap)  # stale: released already
                continue
            if top.due_ms > cutoff:
                break
            if taken and records + top.record_count > self.config.max_plan_records:
                break
            popped.append(heapq.heappop(heap))
            taken.append(top)
            records += top.record_count
        for batch in popped:  # the book is unchanged: `planned` releases them
            heapq.heappush(heap, batch)
        if not taken:
            return None
        epoch, sequence = self._after
        last = self._last_plan
        if last is not None and now_ms - last.made_ms > self.config.fire_renew_ms:
            # the source may have forgotten the idle fire producer: a new one, at sequence 0
            if carry:
                return None
            epoch, sequence = epoch + 1, 0
        if carry and last is not None and last.own and not self._faults.no_carry:
            carried = last.own
            return Plan(last.own_sequence, carried + tuple(taken), epoch, now_ms, len(carried))
        # (the bug `no_carry`: the last plan's batches still being fired are not listed again,
        # so a new leader never fires those that had not landed)
        return Plan(sequence, tuple(taken), epoch, now_ms)

    def done_marker(self) -> Plan | None:
        """The empty plan (the next sequence, no batches) that marks the last plan as fired in
        full: the leader appends it once every append of the last plan succeeded and no plan
        follows at once (a next plan marks its predecessor so by itself). Without it a later
        leader fires the last plan again, and if the source partition forgot the fire producer
        meanwhile (a day without firing) the repeat is not a duplicate there: it lands twice.
        None when there is no last plan or it is empty (marked already)."""
        plan = self._last_plan
        if plan is None or not plan.batches or self._faults.no_done_marker:
            return None
        return Plan(plan.sequence + plan.record_count, (), plan.epoch, plan.made_ms)

    def remark(self) -> Plan | None:
        """The done marker again (the empty plan at the next sequence) when the last plan is
        one: a roll round appends it when the log is to be cut past the last plan's record,
        so that the log keeps the sequence the next plan continues (an index started from
        the cut log learns it there). None when there is no last plan, or it is not empty (its
        own done marker comes once it fired)."""
        plan = self._last_plan
        if plan is None or plan.batches:
            return None
        return Plan(plan.sequence, (), plan.epoch, plan.made_ms)

    @property
    def last_plan(self) -> Plan | None:
        """The last plan in the log: a new leader fires its batches again (none if it is a
        done marker)."""
        return self._last_plan

    def refire(self) -> Plan | None:
        """What a new leader fires again before anything new: the last plan, with the batches
        it carries (their outcome is as unknown as its own); None when there is none."""
        plan = self._last_plan
        if plan is not None and self._faults.refire_own_only:
            return plan.own_plan()  # the bug: the carried batches that had not landed are lost
        return plan

    def next_due_ms(self) -> int | None:
        """The earliest due time among loaded pending timers (None: none loaded)."""
        self._drop_stale_top()
        return self._heap[0].due_ms if self._heap else None

    @property
    def pending(self) -> int:
        """Pending records (loaded and on disk)."""
        return self._held_records + self._unloaded_records

    @property
    def loaded_batches(self) -> int:
        """Pending batches held in memory (the near window's): what bounds the book's memory."""
        return len(self._held)

    @property
    def window_end_bucket(self) -> int | None:
        """The last bucket of the near window seen so far (None before `buckets_to_load`)."""
        return self._window_end

    def unloaded(self) -> dict[int, BucketSummary]:
        """The buckets counted, not loaded: bucket -> (pending records, pending batches)."""
        return {b: (r, n) for b, (r, n) in self._unloaded.items()}

    # -- internals -------------------------------------------------------------------------------
    def _hold(self, batch: TimerBatch) -> None:
        if batch.offset in self._held:
            return
        self._held[batch.offset] = batch
        self._held_records += batch.record_count
        bucket = bucket_of(batch.due_ms, self.config.bucket_ms)
        self._loaded[bucket] = self._loaded.get(bucket, 0) + 1
        heapq.heappush(self._heap, batch)

    def _release(self, offset: int) -> None:
        batch = self._held.pop(offset, None)
        if batch is None:
            return  # not held: released before, or (a plan of a bucket not loaded) on disk
        self._held_records -= batch.record_count
        bucket = bucket_of(batch.due_ms, self.config.bucket_ms)
        left = self._loaded[bucket] - 1
        if left:
            self._loaded[bucket] = left
        else:
            del self._loaded[bucket]

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap and self._held.get(heap[0].offset) is not heap[0]:
            heapq.heappop(heap)
        if len(heap) > 2 * len(self._held) + 64:  # many stale entries: rebuild
            self._heap = list(self._held.values())
            heapq.heapify(self._heap)

    def _set_last_plan(self, plan: Plan | None) -> None:
        self._last_plan = plan
        self._last_offsets = frozenset(b.offset for b in plan.batches) if plan else frozenset()
        self._after = (0, 0) if plan is None else plan.after


def _validate(config: TimerConfig) -> None:
    for name in (
        "bucket_ms",
        "fire_renew_ms",
        "max_plan_records",
        "max_plan_batches",
        "max_roll_batches",
        "max_roll_buckets",
    ):
        if getattr(config, name) < 1:
            raise InvalidTimer(f"TimerConfig.{name} = {getattr(config, name)}: must be >= 1")
    if config.window_buckets < 0:
        raise InvalidTimer(f"TimerConfig.window_buckets = {config.window_buckets}: must be >= 0")
