"""The simulated world of one queue group, from one seed: producers append records, receivers
receive / ack / release / reject / extend or let leases expire, crash (their sessions end) or
leave, new ones join; the coordinator's entries go to a log that commits them after a delay, and
it fails over (a fresh coordinator loads the committed entries; the uncommitted tail survives in
part); the dead-letter copier copies committed decisions to a simulated dead-letter topic with
the (producer id, sequence) dedupe, and may crash between a copy and its confirmation.

Time: tick n is epoch ms T0 + n * tick_ms. The last `quiet_ticks` have no faults and no new
records: receivers ack whatever is not poison (poison records are rejected or let expire), so by
the end every record must be acked or dead-lettered (`QueueChecker.drained`).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from consumers.coordinator import Coordinator, CoordinatorConfig, Outcome
from consumers.entries import QueueLeased, decode
from consumers.faults import NO_FAULTS, CoordinatorFaults
from consumers.queue_types import (
    KEY,
    NONE,
    QUEUE,
    Extent,
    Lease,
    QueueOptions,
    ReceiveRequest,
    SettleReply,
    SettleRequest,
)
from consumers.sim.queue_checker import QueueChecker
from consumers.sim.queue_receiver import Receiver
from consumers.types import JOIN, LEAVE, FencedMember, GroupError, HeartbeatRequest, TopicMeta

__all__ = ["QUEUE_STAT_NAMES", "QueueSimulation"]

GROUP, TOPIC = "qsim", "jobs"
T0 = 1_700_000_000_000
QUEUE_STAT_NAMES = (
    "records",
    "receives",
    "leases",
    "acks",
    "releases",
    "rejects",
    "extends",
    "lost_settlements",
    "expiries",
    "dead_letter_copies",
    "dead_letter_duplicates",
    "crashes_between_copy_and_confirm",
    "failovers",
    "lost_batches",
    "retention_steps",
    "dead_letters_gone",
    "key_skips",
    "joins",
    "leaves",
    "crashes",
    "fenced",
)


@dataclass(slots=True)
class _Batch:
    entries: list[bytes]
    commit_at: int
    decided_at_ms: int
    from_tick: bool


@dataclass(slots=True)
class _Reply:
    needed: int  # batches that must commit before it is delivered
    pid: int
    reply: object
    sent: tuple[Lease, ...] = ()  # a settle's leases, as the member saw them
    sent_at_ms: int = 0


class QueueSimulation:
    def __init__(self, seed: int, *, faults: CoordinatorFaults = NO_FAULTS) -> None:
        self.seed, self.faults = seed, faults
        self.rng = rng = random.Random(seed)
        self.tick_ms = 100
        self.config = CoordinatorConfig(tick_ms=self.tick_ms)
        self.partitions = rng.randint(1, 4)
        self.topics = {TOPIC: TopicMeta("jobs-uid", self.partitions)}
        self.options = QueueOptions(
            max_deliveries=rng.randint(2, 5),
            ordering=rng.choice((NONE, NONE, KEY)),
            backoff_ms=rng.choice(((100,), (100, 300), (200, 400, 800))),
            max_in_flight=rng.choice((4, 16, 2_000)),
        )
        self.high_watermarks = [0] * self.partitions
        self.log_starts = [0] * self.partitions  # retention deletes below
        self.retention = rng.random() < 0.3  # this seed's topic has retention
        self.keys: dict[tuple[int, int], bytes | None] = {}
        self.poison: set[tuple[int, int]] = set()
        self.checker = QueueChecker(self.options.max_deliveries)
        self.coordinator = self._fresh([])
        self.batches: list[_Batch] = []
        self.committed_batches = 0
        self.replies: list[_Reply] = []
        self.receivers: list[Receiver] = []
        self.stats: Counter[str] = Counter()
        self.trace = hashlib.blake2b(digest_size=16)
        self.now = 0
        self.loading_until = 0
        self.quiet_at = 0

    @property
    def now_ms(self) -> int:
        return T0 + self.now * self.tick_ms

    def digest(self) -> str:
        return self.trace.hexdigest()

    # -- the run ---------------------------------------------------------------------------------
    def run(self, steps: int, quiet_ticks: int = 200, drain_ticks: int = 1_000) -> None:
        """`steps` ticks, the last `quiet_ticks` of them without faults or new records; then up
        to `drain_ticks` more until every record is acked or dead-lettered (else a violation)."""
        self.quiet_at = max(0, steps - quiet_ticks)
        now = 0
        while now < steps or (
            steps > quiet_ticks and now < steps + drain_ticks and not self.checker.all_settled()
        ):
            self.now = now
            if now < self.quiet_at:
                self._produce()
                self._faults()
            elif sum(r.alive for r in self.receivers) < 3:
                self._join()  # enough receivers to drain
            self._step()
            now += 1
        if steps > quiet_ticks:
            self.checker.drained(self.keys)
            self.stats["liveness_ticks"] = now - steps  # ticks past the run it took to drain

    def _step(self) -> None:
        while self.committed_batches < len(self.batches):
            batch = self.batches[self.committed_batches]
            if batch.commit_at > self.now:
                break
            self._commit(batch)
        still = []
        for reply in self.replies:
            if reply.needed <= self.committed_batches:
                self._deliver(reply)
            else:
                still.append(reply)
        self.replies = still
        serving = self.now >= self.loading_until
        if serving:
            self._append(self.coordinator.tick(self.now_ms), from_tick=True)
            if self.committed_batches == len(self.batches):
                self._copy_dead_letters()
        for receiver in self.receivers:
            if receiver.alive:
                self._act(receiver, serving)
        view = self.coordinator.queue_view(GROUP, self.topics) if self._known() else None
        for p in view.queue if view is not None else ():
            self.checker.window(
                p.partition, p.acked_floor, p.next_offset, self.options.max_in_flight
            )

    # -- producers and faults --------------------------------------------------------------------
    def _produce(self) -> None:
        for partition in range(self.partitions):
            for _ in range(self.rng.choice((0, 0, 1, 2))):
                offset = self.high_watermarks[partition]
                record = (partition, offset)
                key = None
                if self.options.ordering == KEY and self.rng.random() < 0.9:
                    key = b"k%d" % self.rng.randint(0, 5)
                self.keys[record] = key
                self.checker.produced(record, key)
                if self.rng.random() < 0.05:
                    self.poison.add(record)
                self.high_watermarks[partition] = offset + 1
                self.stats["records"] += 1

    def _faults(self) -> None:
        rng = self.rng
        if rng.random() < 0.01:
            self.failover()
        if self.retention and rng.random() < 0.02:
            p = rng.randrange(self.partitions)
            start = min(self.high_watermarks[p], self.log_starts[p] + rng.randint(1, 30))
            self.log_starts[p] = start
            self.checker.retention(p, start)
            self.stats["retention_steps"] += 1
        alive = [r for r in self.receivers if r.alive]
        if not alive or (rng.random() < 0.03 and len(alive) < 6):
            self._join()
        elif rng.random() < 0.02:
            receiver = rng.choice(alive)
            if rng.random() < 0.5:
                receiver.alive = False  # crash: silent; its session ends, its leases return
                self.stats["crashes"] += 1
            elif self._serving():
                request = HeartbeatRequest(GROUP, receiver.member_id, LEAVE, 0, kind=QUEUE)
                self._call(receiver, lambda: self.coordinator.heartbeat(request, self.topics))
                receiver.alive = False
                self.stats["leaves"] += 1
        self.trace.update(f"t{self.now}".encode())

    def failover(self, survive: int | None = None) -> None:
        self.stats["failovers"] += 1
        uncommitted = len(self.batches) - self.committed_batches
        if survive is None:
            survive = self.rng.randint(0, uncommitted)
        for batch in self.batches[self.committed_batches : self.committed_batches + survive]:
            self._commit(batch)
        self.stats["lost_batches"] += uncommitted - survive
        del self.batches[self.committed_batches :]
        self.replies.clear()
        for receiver in self.receivers:
            receiver.busy = False
        self.coordinator = self._fresh([e for b in self.batches for e in b.entries])
        self.loading_until = self.now + self.rng.randint(1, 4)
        self.trace.update(f"failover@{self.now}:{survive}".encode())

    # -- receivers -------------------------------------------------------------------------------
    def _join(self) -> None:
        pid = len(self.receivers)
        session_ms = self.rng.choice((1_000, 1_500, 2_000))
        self.receivers.append(Receiver(pid, random.Random(self.rng.getrandbits(64)), session_ms))
        self.stats["joins"] += 1

    def _act(self, r: Receiver, serving: bool) -> None:
        rng, now_ms = r.rng, self.now_ms
        for key in [k for k, lease in r.held.items() if lease.deadline_ms <= now_ms]:
            lease = r.held.pop(key)  # its deadline passed: it is not ours any more
            self.stats["expiries"] += 1
            if rng.random() < 0.3:
                r.stale.append(lease)  # a slow worker settles it anyway: it must be lost
        if r.busy and self.now - r.busy_since > 10:
            r.busy = False  # the reply was lost (a failover): give it up
        if not serving:
            return
        if not r.member_id:
            request = HeartbeatRequest(
                GROUP, "", JOIN, r.session_ms, topics=(TOPIC,), kind=QUEUE, queue=self.options
            )
            try:
                outcome = self.coordinator.heartbeat(request, self.topics)
            except GroupError:
                return
            self._append(outcome.entries)
            r.member_id = outcome.reply.member_id
            self.trace.update(f"join {r.pid} {r.member_id}".encode())
            return
        if self.now >= r.next_heartbeat:
            r.next_heartbeat = self.now + rng.randint(1, 3)
            beat = HeartbeatRequest(GROUP, r.member_id, 1, r.session_ms, kind=QUEUE)
            try:
                self._append(self.coordinator.heartbeat(beat, self.topics).entries)
            except FencedMember:
                self._fenced(r)
                return
        if r.busy:
            return
        quiet = self.now >= self.quiet_at
        if (r.held or r.stale) and rng.random() < (0.9 if quiet else 0.5):
            self._settle(r, quiet)
        elif rng.random() < (0.9 if quiet else 0.5):
            self._receive(r)

    def _receive(self, r: Receiver) -> None:
        rng = r.rng
        extents = {
            (TOPIC, p): Extent(self.log_starts[p], self.high_watermarks[p])
            for p in range(self.partitions)
        }
        keys = None
        if self.options.ordering == KEY:
            keys = {}
            for p in range(self.partitions):
                window = self.coordinator.queue_key_window(GROUP, TOPIC, p, extents[(TOPIC, p)], 64)
                keys[(TOPIC, p)] = {o: self.keys[(p, o)] for o in window}
        request = ReceiveRequest(
            GROUP,
            r.member_id,
            1,
            TOPIC,
            rng.randint(1, 32 if self.now >= self.quiet_at else 8),
            rng.choice((1_000, 1_500, 3_000)),
        )
        self.stats["receives"] += 1
        self._call(
            r,
            lambda: self.coordinator.queue_receive(
                request, self.topics, extents, self.now_ms, keys
            ),
        )

    def _settle(self, r: Receiver, quiet: bool) -> None:
        settlements, sent = r.choose_settlements(TOPIC, self.poison, quiet, self.stats)
        if not settlements:
            return
        for lease in sent:
            r.held.pop((lease.partition, lease.offset), None)
        request = SettleRequest(GROUP, r.member_id, 1, tuple(settlements))
        self._call(
            r, lambda: self.coordinator.queue_settle(request, self.topics, self.now_ms), tuple(sent)
        )

    def _call(
        self, r: Receiver, call: Callable[[], Outcome[Any]], sent: tuple[Lease, ...] = ()
    ) -> None:
        try:
            outcome = call()
        except FencedMember:
            self._fenced(r)
            return
        self._append(outcome.entries)
        r.busy, r.busy_since = True, self.now
        self.replies.append(_Reply(len(self.batches), r.pid, outcome.reply, sent, self.now_ms))
        self.trace.update(f"<{r.pid}:{outcome.reply!r}".encode())

    def _deliver(self, reply: _Reply) -> None:
        r = self.receivers[reply.pid]
        r.busy = False
        if not r.alive:
            return
        if isinstance(reply.reply, SettleReply):
            sent = {(x.partition, x.offset, x.delivery_count): x for x in reply.sent}
            for lease in reply.reply.lost:
                self.stats["lost_settlements"] += 1
                record = (lease.partition, lease.offset)
                held = sent[(*record, lease.delivery_count)]
                self.checker.settle_lost(r.member_id, record, held.deadline_ms, reply.sent_at_ms)
            for lease in reply.reply.applied:
                record = (lease.partition, lease.offset)
                held = sent[(*record, lease.delivery_count)]
                self.checker.settle_applied(r.member_id, record, held.deadline_ms, reply.sent_at_ms)
                if lease.deadline_ms != held.deadline_ms:
                    r.held[record] = lease  # extended: still ours
        elif isinstance(reply.reply, list):
            for lease in reply.reply:
                r.held[(lease.partition, lease.offset)] = lease
                self.stats["leases"] += 1

    def _fenced(self, r: Receiver) -> None:
        self.stats["fenced"] += 1
        r.member_id, r.held, r.busy = "", {}, False

    # -- the dead-letter copier ------------------------------------------------------------------
    def _copy_dead_letters(self) -> None:
        jobs = self.coordinator.queue_dead_letter_jobs()
        if not jobs:
            return
        copied, gone = [], []
        for job in jobs:
            if job.offset < self.log_starts[job.partition]:
                # retention deleted its source: a placeholder keeps the sequence contiguous
                self.checker.copy(job, job.partition % self.partitions, placeholder=True)
                gone.append(job)
                self.stats["dead_letters_gone"] += 1
            elif self.checker.copy(job, job.partition % self.partitions):
                copied.append(job)
                self.stats["dead_letter_copies"] += 1
            else:
                copied.append(job)
                self.stats["dead_letter_duplicates"] += 1
        if self.now < self.quiet_at and self.rng.random() < 0.2:
            self.stats["crashes_between_copy_and_confirm"] += 1
            self.failover(survive=0)
            return
        self._append(self.coordinator.queue_dead_lettered(copied).entries)
        self._append(self.coordinator.queue_dead_letter_gone(gone).entries)

    # -- the log ---------------------------------------------------------------------------------
    def _serving(self) -> bool:
        return self.now >= self.loading_until

    def _known(self) -> bool:
        return GROUP in self.coordinator.groups()

    def _append(self, entries: list[bytes], from_tick: bool = False) -> None:
        if not entries:
            return
        previous = self.batches[-1].commit_at if self.batches else 0
        delay = self.rng.randint(0, 2)
        self.batches.append(
            _Batch(entries, max(previous, self.now + delay), self.now_ms, from_tick)
        )
        for entry in entries:
            self.trace.update(entry)

    def _commit(self, batch: _Batch) -> None:
        decoded = [decode(e) for e in batch.entries]
        self.stats["key_skips"] += sum(
            len(e.skipped) for e in decoded if isinstance(e, QueueLeased)
        )
        self.checker.committed(decoded, batch.decided_at_ms, batch.from_tick)
        self.committed_batches += 1

    def _fresh(self, entries: list[bytes]) -> Coordinator:
        coordinator = Coordinator(self.config, faults=self.faults)
        for entry in entries:
            coordinator.load(entry)
        coordinator.start()
        return coordinator
