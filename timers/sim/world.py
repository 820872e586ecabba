"""One seeded run of a timer partition: producers accept delayed batches into a replicated timer
log, replicas fold the committed log into their indexes (flushing now and then, crashing and
replaying from `applied_offset`), and the leader builds a TimerBook from its index, plans, and
fires each plan into a model source partition (`parts.SourcePartition`: the idempotent-producer
table remembering a producer's last batches only) through a model of the node's copier
(`firing`: behind taken as written, out of order or unknown rebased once). Producers in
`producers`. Faults: leader failovers (the uncommitted tail committed or lost), crashes between
a plan and its firing, in the middle of it or right after it, a firing pipeline failing
part-way (the plan sent again one by one), index crashes, producer retries, crashes between a
roll's copies and its floor. Time is simulated (`now_ms`); every choice comes from
`random.Random(seed)`.

Retention: records older than `roll_age_ms` are to go (the timer log's retention, scaled). Now
and then the leader rolls the pending timers below that point forward (`timers.rolls`: copies,
then a floor record), one round at a time between plans; and the log is cut to the lowest
offset any replica's index still needs (`min_pending_offset`). A record read below the cut
(firing, a copy, an index replaying) is a "retention" violation.

The leader follows the firing protocol of timers/types.py: on leadership it waits for the log
to settle (its own term's entry committed: the tail is committed or dropped), brings its index
up to the commit point, restores a book (summary + near buckets), fires the last plan again,
then loops: plan (append a plan record) -> once committed, `planned` and fire every batch in
order -> the next plan. `TimerChecker` judges it all as it runs.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Callable

from timers.book import TimerBook, bucket_of
from timers.faults import NO_FAULTS, TimerFaults
from timers.sim.checker import TimerChecker
from timers.sim.firing import Copier, Firing
from timers.sim.index_model import IndexStore, MemoryIndexStore
from timers.sim.parts import FORGET_AFTER_MS, LogRecord, SourcePartition
from timers.sim.producers import PRODUCERS, Producers
from timers.sim.retention import Retention
from timers.sim.state import STAT_NAMES, Leader, Replica
from timers.types import Rolled, TimerBatch, TimerConfig

__all__ = ["LATE_BOUND_MS", "SIM_CONFIG", "STAT_NAMES", "TimerSimulation"]

# scaled: 5-second buckets, so far timers (up to 30 buckets ahead) come due within a run
SIM_CONFIG = TimerConfig(
    bucket_ms=5_000,
    window_buckets=2,
    max_plan_records=40,
    max_plan_batches=6,
    fire_renew_ms=FORGET_AFTER_MS // 2,  # as FIRE_RENEW_MS is half the source's expiry
)
STEP_MS = (50, 600)  # time per step: the leader's timer resolution in the simulation
FAR_MS = 150_000
ROLL_AGE_MS = 10_000  # scaled: the timer log's retention (far timers are up to 15 times longer)
ROLL_CHANCE = 0.15  # a leader starts a roll round in this share of steps
CUT_CHANCE = 0.3  # the log is cut to what every index still needs in this share of steps
LATE_BOUND_MS = 3_000  # lands within this of max(due, accepted, leader ready): 5 steps at most
CYCLES = 4  # plan -> commit -> fire rounds a leader may do within one step
PARTLY_FIRED = 0.3  # a plan's firing stops part-way (for a cycle) in this share of cycles


class TimerSimulation(Retention, Firing, Producers):
    def __init__(
        self,
        seed: int,
        *,
        faults: TimerFaults = NO_FAULTS,
        stores: Callable[[int], IndexStore] | None = None,
        replicas: int = 3,
        config: TimerConfig = SIM_CONFIG,
        roll_age_ms: int | None = ROLL_AGE_MS,
        far_ms: int = FAR_MS,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults
        self.config = config
        self.roll_age_ms = roll_age_ms  # None: no roll-forward (long timers pin the log)
        self.far_ms = far_ms
        self.log_start = 0  # the log was cut below this offset
        self.floor_offset = 0  # the highest floor committed
        self.now = 1_000_000_000  # ms
        self.step_count = 0
        self.faulty = False  # this step may crash a node
        self.checker = TimerChecker(config, LATE_BOUND_MS)
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        self.log: list[LogRecord] = []
        self.offsets: list[int] = []
        self.commit = 0
        self.copier = Copier(SourcePartition(), faults, self.stats)
        self.accepted_ids: set[tuple[int, int]] = set()  # the timer log's idempotence table
        self.unacked: list[tuple[int, int, int, int]] = []  # (producer, sequence, due, count)
        self.producer_next = dict.fromkeys(range(1, PRODUCERS + 1), 0)
        make = stores or (lambda _: MemoryIndexStore(config.bucket_ms))
        self._make_store = make
        self.replicas: list[Replica] = []
        for number in range(replicas):
            store = make(number)
            self.replicas.append(Replica(store, store.open()))
        self.leader: Leader | None = None
        self.election_steps = 1
        self.quiet_until = 0
        self.trace = hashlib.blake2b(digest_size=16)

    # -- the run ---------------------------------------------------------------------------------
    def run(self, steps: int, drain_steps: int = 1_000) -> None:
        """`steps` of production and faults, then a quiet drain until every timer landed."""
        for _ in range(steps):
            self.step(faulty=True)
        for _ in range(drain_steps):
            if not self.checker.pending and self._idle():
                break
            self.step(faulty=False)
        self.checker.finish()

    def step(self, *, faulty: bool) -> None:
        self.step_count += 1
        self.faulty = faulty
        self.now += self.rng.randint(*STEP_MS)
        if faulty:
            self._faults()
        if self.leader is None:
            self.election_steps -= 1
            if self.election_steps <= 0:
                self._elect()
        if faulty and self.step_count >= self.quiet_until and self.rng.random() < 0.01:
            self.quiet_until = self.step_count + self.rng.randint(60, 150)  # producers pause
            self.stats["quiet_stretches"] += 1
        if faulty and self.leader is not None and self.step_count >= self.quiet_until:
            self._produce()
        if self.leader is not None:
            self._lead(self.leader)
        for number, replica in enumerate(self.replicas):
            if self.leader is None or number != self.leader.replica:
                self._apply(replica, None)
            if self.rng.random() < 0.3:
                replica.index.flush(self._offset_after(replica.applied))
        if self.rng.random() < CUT_CHANCE:
            self._cut()
        self.stats["max_retained"] = max(
            self.stats["max_retained"], self._next_offset() - self.log_start
        )
        if self.leader is not None:
            self._check(self.leader)

    def digest(self) -> str:
        return self.trace.hexdigest()

    def _idle(self) -> bool:
        leader = self.leader
        return (
            leader is not None
            and leader.inflight is None
            and leader.firing is None
            and leader.rolling is None
        )

    def _event(self, *parts: object) -> None:
        self.trace.update(repr((self.step_count, self.now, *parts)).encode())

    # -- the timer log ---------------------------------------------------------------------------
    def _next_offset(self) -> int:
        return self.log[-1].end if self.log else 0

    def _offset_after(self, position: int) -> int:
        return self.log[position - 1].end if position else 0

    def _append(self, record: LogRecord) -> None:
        self.log.append(record)
        self.offsets.append(record.offset)

    def _commit_all(self) -> None:
        self._commit_to(len(self.log))

    def _commit_to(self, position: int) -> None:
        for record in self.log[self.commit : position]:
            if record.batch is not None and record.rolled_from >= 0:
                self.checker.committed_roll(Rolled(record.batch, record.rolled_from))
                self.stats["rolls"] += 1
            elif record.batch is not None:
                self.checker.committed_batch(
                    record.batch, record.producer, record.sequence, self.now
                )
            elif record.floor >= 0:
                self.checker.committed_floor(record.floor)
                self.floor_offset = max(self.floor_offset, record.floor)
                self.stats["floors"] += 1
            else:
                assert record.plan is not None
                self.checker.committed_plan(record.plan, record.offset)
            self._event("commit", record.offset)
        self.commit = max(self.commit, position)

    def _drop_tail(self) -> None:
        for record in self.log[self.commit :]:
            if record.batch is not None and record.rolled_from >= 0:
                self.stats["rolls_lost"] += 1
            elif record.batch is not None:
                self.accepted_ids.discard((record.producer, record.sequence))
                self.unacked.append(
                    (
                        record.producer,
                        record.sequence,
                        record.batch.due_ms,
                        record.batch.record_count,
                    )
                )
        self._event("drop", len(self.log) - self.commit)
        del self.log[self.commit :]
        del self.offsets[self.commit :]

    def _apply(self, replica: Replica, book: TimerBook | None) -> None:
        """Folds the committed records the replica has not applied into its index (and book)."""
        for record in self.log[replica.applied : self.commit]:
            self.checker.needed("a replica folding its log", record.offset, self.log_start)
            if record.batch is not None and record.rolled_from >= 0:
                roll = Rolled(record.batch, record.rolled_from)
                replica.index.rolled(roll)
                if book is not None:
                    book.rolled(roll)
            elif record.floor >= 0:
                replica.index.floor(record.floor)
            elif record.batch is not None:
                replica.index.add(record.batch)
                if book is not None:
                    book.accepted(record.batch)
            else:
                assert record.plan is not None
                replica.index.planned(record.plan, record.offset)
                if book is not None:
                    book.planned(record.plan)
        replica.applied = self.commit

    # -- faults ----------------------------------------------------------------------------------
    def _faults(self) -> None:
        rng, leader = self.rng, self.leader
        if leader is not None and leader.inflight is not None and rng.random() < 0.2:
            # the plan commits, then a crash before its firing, in the middle of it or after it
            # (before the next plan or done marker): its successor fires it again
            self.stats["crashes_mid_fire"] += 1
            self._commit_all()
            self._apply(self.replicas[leader.replica], leader.book)
            self._committed(leader)
            plan = leader.firing
            assert plan is not None
            self._fire(leader, limit=rng.randint(leader.next_batch, len(plan.batches)))
            self._failover()
        elif (
            leader is not None
            and leader.rolling is not None
            and leader.rolling >= self.commit
            and rng.random() < 0.3
        ):
            # some or all of the copies commit, then a crash before the floor record does
            self.stats["crashes_mid_roll"] += 1
            self._commit_to(rng.randint(self.commit, leader.rolling))
            self._apply(self.replicas[leader.replica], leader.book)
            self._drop_tail()
            self._failover()
        elif leader is not None and rng.random() < 0.03:
            self._failover()
        if rng.random() < 0.01:
            self._rebuild_index(rng.randrange(len(self.replicas)))
        if rng.random() < 0.03:
            number = rng.randrange(len(self.replicas))
            if self.leader is not None and self.leader.replica == number:
                self._failover()
            else:
                self._crash_index(number)

    def _failover(self) -> None:
        leader = self.leader
        assert leader is not None
        self.stats["failovers"] += 1
        if self.rng.random() < 0.5:
            self._commit_all()  # the new leader's own-term entry commits the tail with it
        else:
            self.stats["tails_lost"] += self.commit < len(self.log)
            self._drop_tail()
        self.leader = None
        self.election_steps = self.rng.randint(1, 3)
        if self.rng.random() < 0.5:
            self._crash_index(leader.replica)
        self._event("failover", leader.replica)

    def _crash_index(self, number: int) -> None:
        replica = self.replicas[number]
        self.stats["index_crashes"] += 1
        replica.store.crash()
        replica.index = replica.store.open(self.log_start)  # (a new one starts there)
        applied = replica.index.applied_offset
        replica.applied = bisect.bisect_left(self.offsets, applied, 0, self.commit)
        self._event("index-crash", number, applied)

    # -- the leader ------------------------------------------------------------------------------
    def _elect(self) -> None:
        number = self.rng.randrange(len(self.replicas))
        replica = self.replicas[number]
        self._apply(replica, None)  # every earlier entry is committed: index up to date
        book = TimerBook(self.config, faults=self.faults)
        book.restore(replica.index.summary(), replica.index.last_plan)
        leader = Leader(number, book, self.now)
        self._load(leader)
        if book.last_plan is not None:
            leader.firing = book.refire()  # its outcome is unknown: fire it again
        self.leader = leader
        self._event("elected", number)

    def _load(self, leader: Leader) -> None:
        """Reads the buckets the book asks for as a node does, off its event loop: what the
        index holds now reaches the book later (this cycle or a later one), after more records
        may have committed and plans fired."""
        index = self.replicas[leader.replica].index
        still: list[tuple[int, list[TimerBatch] | None, int]] = []
        for bucket, read, issued in leader.reads:
            overdue = issued < self.step_count  # a read takes at most the rest of a step
            batches = read
            if batches is None:  # the read has not started yet
                started = overdue or self.rng.random() < 0.5
                self.stats["slow_reads"] += not started
                batches = index.bucket(bucket) if started else None
            if batches is not None and not overdue and self.rng.random() < 0.05:
                leader.book.load_failed(bucket)  # an I/O error: asked for again
                self.stats["failed_reads"] += 1
            elif batches is not None and (overdue or self.rng.random() < 0.6):
                leader.book.load_bucket(bucket, batches)
                self.stats["bucket_loads"] += 1
            else:
                still.append((bucket, batches, issued))
        leader.reads = still
        for bucket in leader.book.buckets_to_load(self.now):
            leader.reads.append((bucket, None, self.step_count))

    def _lead(self, leader: Leader) -> None:
        replica = self.replicas[leader.replica]
        roll = self.roll_age_ms is not None and self.rng.random() < ROLL_CHANCE
        for _ in range(CYCLES):
            progress = False
            self._apply(replica, leader.book)
            if leader.inflight is not None and leader.inflight_position < self.commit:
                self._committed(leader)
            if leader.rolling is not None and leader.rolling < self.commit:
                leader.rolling = None  # committed, and folded into the book just above
            self._load(leader)
            if leader.firing is not None:
                # now and then only part of it (its later batches in a later cycle or step):
                # the next plan may be made meanwhile (two plans outstanding)
                partly = self.rng.random() < PARTLY_FIRED
                end = len(leader.firing.batches)
                self._fire(leader, self.rng.randint(leader.next_batch, end) if partly else None)
                progress = True
                if self._crash_after_fire(leader):
                    return
            # firing comes first: a round starts only when nothing is due
            if roll and self._idle() and leader.book.next_plan(self.now) is None:
                roll = False
                progress = self._roll(leader)
            # a plan while the last one is being fired (never while the one before it is)
            carry = leader.firing is not None
            if leader.inflight is None and leader.rolling is None and leader.queued is None:
                plan = leader.book.next_plan(self.now, carry=carry)
                if plan is None and not carry:
                    plan = leader.book.done_marker()
                if plan is not None:
                    self.stats["carried_plans"] += plan.carried > 0
                    self.stats["done_markers"] += not plan.batches
                    last = leader.book.last_plan
                    self.stats["fire_epochs"] += last is not None and plan.epoch > last.epoch
                    self.checker.plan_made(plan, self.now)
                    self._append(LogRecord(self._next_offset(), None, plan, at_ms=self.now))
                    leader.inflight, leader.inflight_position = plan, len(self.log) - 1
                    self.stats["plans"] += 1
                    self._event("plan", plan.sequence, len(plan.batches))
                    progress = True
            # a roll round commits more slowly: crashes between its copies and its floor
            if self.commit < len(self.log) and self.rng.random() < (
                0.8 if leader.rolling is not None else 0.9
            ):
                self._commit_all()
                progress = True
            if not progress:
                break
        self._apply(replica, leader.book)

    @staticmethod
    def _committed(leader: Leader) -> None:
        """The leader's plan in flight committed: its own batches are fired once the plan
        being fired (if any: two plans outstanding) fired in full, as `cluster.timers` does."""
        plan, leader.inflight = leader.inflight, None
        assert plan is not None
        if leader.firing is None:
            leader.firing, leader.next_batch = plan.own_plan(), 0
        else:
            leader.queued = plan.own_plan()

    def _crash_after_fire(self, leader: Leader) -> bool:
        """A crash (in a faulty step) right after a plan longer than the source remembers per
        producer fired in full, before its done marker or the next plan: the successor fires it
        again one by one, and its first batches are answered behind (the CI run that fired
        twice)."""
        plan = leader.book.last_plan
        if (
            not self.faulty
            or leader.firing is not None
            or plan is None
            or len(plan.batches) <= self.copier.source.window
            or self.rng.random() >= 0.3
        ):
            return False
        self.stats["crashes_after_fire"] += 1
        self._failover()
        return True

    def _check(self, leader: Leader) -> None:
        self.checker.both_live("the leader's book", leader.book.holds)
        self.checker.counts("the leader's book", leader.book.pending)
        self.checker.counts("the leader's index", self.replicas[leader.replica].index.pending)
        self.checker.memory(leader.book.loaded_batches, self.now)
        for number, replica in enumerate(self.replicas):
            index = replica.index
            if replica.applied == self.commit:
                self.checker.retention(
                    f"replica {number}'s index",
                    index.min_pending_offset(),
                    index.applied_offset,
                    index.last_plan,
                )
        self.stats["max_loaded"] = max(self.stats["max_loaded"], leader.book.loaded_batches)
        self.stats["max_lateness_ms"] = self.checker.max_lateness_ms
        self.stats["forgotten_producers"] = self.copier.source.forgotten
        far = bucket_of(self.now, self.config.bucket_ms) + self.config.window_buckets
        self._event("check", leader.book.pending, leader.book.loaded_batches, far)
