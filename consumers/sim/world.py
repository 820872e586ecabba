"""The simulated world of one group: a coordinator whose entries go to a log, members that follow
the SDK's rules, a network that delays and loses messages, and faults, all from one seed.

- The log: each outcome's entries are one batch, committed after a random delay of ticks, in
  order. A reply (and a read) leaves only once every entry appended up to it committed, as the
  node does. A failover drops the pending replies; a random prefix of the uncommitted batches
  survives (the new leader commits it), the rest are lost; a fresh `Coordinator` loads the
  committed entries, `start()`s, and answers nothing for a few ticks (loading).
- Members (`SimMember`) join at random times, leave (dynamic or static), crash silently, pause
  past their session and resume (zombies); static instances come back under a new process.
- The last `quiet_ticks` of a run have no faults: paused members resume, no message is lost,
  no one joins or leaves, no failover. By its end, (d) must hold.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import Counter
from dataclasses import dataclass, field

from consumers.coordinator import Coordinator, CoordinatorConfig
from consumers.entries import decode
from consumers.faults import NO_FAULTS, CoordinatorFaults
from consumers.sim.checker import Checker, Violation
from consumers.sim.member import Request, SimMember, State
from consumers.types import (
    CommitRequest,
    GroupError,
    GroupView,
    HeartbeatRequest,
    TopicMeta,
    TopicPartition,
)

__all__ = ["STAT_NAMES", "Profile", "Simulation"]

GROUP = "sim"
STAT_NAMES = (
    "joins",
    "leaves",
    "static_leaves",
    "crashes",
    "pauses",
    "failovers",
    "lost_batches",
    "entries",
    "commits_accepted",
    "commits_fenced",
    "heartbeats_fenced",
    "self_fenced",
    "zombie_commits_sent",
    "lost_messages",
    "partitions_added",
    "records_processed",
    "liveness_ticks",
)


@dataclass(frozen=True, slots=True)
class Profile:
    max_members: int = 6
    max_delay_ticks: int = 2  # network, each way
    loss: float = 0.03
    max_commit_delay_ticks: int = 2
    failover_chance: float = 0.01  # per tick
    grow_chance: float = 0.004  # per tick: a topic gets more partitions
    event_chance: float = 0.05  # per tick: a join, leave, crash or pause
    sessions_ms: tuple[int, ...] = (2_000, 2_500, 4_000)
    # faults stop this many ticks before the end; by `liveness_bound_ticks` after that (two
    # sessions: a crashed member's, then a rejoin's, plus round trips), every subscribed partition
    # must be processed by a live member, and stay so to the end
    quiet_ticks: int = 150
    liveness_bound_ticks: int = 100


@dataclass(slots=True)
class _Batch:
    entries: list[bytes]
    commit_at: int


@dataclass(order=True, slots=True)
class _Message:
    deliver_at: int
    order: int
    to_coordinator: bool = field(compare=False)
    request: Request = field(compare=False)
    reply: object = field(compare=False, default=None)


class Simulation:
    def __init__(
        self,
        seed: int,
        *,
        faults: CoordinatorFaults = NO_FAULTS,
        shell_fault: str | None = None,
        profile: Profile = Profile(),
        disabled: frozenset[str] = frozenset(),
    ) -> None:
        self.seed, self.faults, self.shell_fault, self.profile = seed, faults, shell_fault, profile
        self.rng = random.Random(seed)
        self.config = CoordinatorConfig(tick_ms=100, heartbeat_interval_ms=500)
        self.topics = {
            "t0": TopicMeta("t0-uid", self.rng.randint(1, 8)),
            "t1": TopicMeta("t1-uid", self.rng.randint(1, 4)),
        }
        self.high_watermarks: dict[TopicPartition, int] = {
            (t, p): 0 for t, meta in self.topics.items() for p in range(meta.partitions)
        }
        self.coordinator = self._fresh_coordinator([])
        self.batches: list[_Batch] = []
        self.committed_batches = 0
        self.replies: list[tuple[int, Request, object]] = []  # (batches needed, request, reply)
        self.network: list[_Message] = []
        self.mailboxes: dict[int, list[_Message]] = {}
        self.members: list[SimMember] = []
        self.checker = Checker(disabled)
        self.stats: Counter[str] = Counter()
        self.trace = hashlib.blake2b(digest_size=16)
        self.now = 0
        self.loading_until = 0
        self.quiet_at = 0
        self._order = 0

    # -- the run ---------------------------------------------------------------------------------
    def run(self, steps: int) -> None:
        self.quiet_at = max(0, steps - self.profile.quiet_ticks)
        covered_at: int | None = None
        for now in range(steps):
            self.now = now
            if now < self.quiet_at:
                self._faults()
            elif now == self.quiet_at:
                self._quiet()
            self._step()
            if now >= self.quiet_at:
                if self._covered():
                    covered_at = now if covered_at is None else covered_at
                else:
                    covered_at = None
        if steps <= self.profile.quiet_ticks:
            return  # no quiet phase of full length: liveness is not judged
        bound = self.profile.liveness_bound_ticks
        if "d" in self.checker.disabled:
            return
        if covered_at is None or covered_at - self.quiet_at > bound:
            uncovered = sorted(self._subscribed() - self._owned_by_live())
            raise Violation(
                "liveness",
                f"{bound} ticks after faults stopped, not every subscribed partition is "
                f"processed by a live member for good (now without one: {uncovered[:6]})",
            )
        self.stats["liveness_ticks"] = covered_at - self.quiet_at

    def digest(self) -> str:
        return self.trace.hexdigest()

    def _step(self) -> None:
        for tp in self.high_watermarks:
            self.high_watermarks[tp] += self.rng.randint(0, 2)
        while self.committed_batches < len(self.batches):
            batch = self.batches[self.committed_batches]
            if batch.commit_at > self.now:
                break
            self._commit(batch)
        still = []
        for needed, request, reply in self.replies:
            if needed <= self.committed_batches or self.shell_fault == "reply_before_commit":
                if request.kind == "commit" and reply is None:
                    self.checker.commit_acknowledged(request.offsets, self.topics)
                self._send(_Message(0, 0, False, request, reply))
            else:
                still.append((needed, request, reply))
        self.replies = still
        while self.network and self.network[0].deliver_at <= self.now:
            message = heapq.heappop(self.network)
            if message.to_coordinator:
                self._handle(message.request)
            else:
                self.mailboxes.setdefault(message.request.pid, []).append(message)
        if self.now >= self.loading_until:
            self._append(self.coordinator.tick())
        for member in self.members:
            if member.state is not State.PAUSED:  # a paused member's messages wait for it
                for message in self.mailboxes.pop(member.pid, []):
                    member.on_reply(message.request, message.reply, self.now)
            for tp, position in member.started:
                self.checker.starts_at_commit(member.pid, tp, self.topics[tp[0]].uid, position)
            member.started.clear()
            processed = member.step(self.now, self.high_watermarks)
            for tp, (start, end) in processed.items():
                if self.shell_fault == "skip_ahead":
                    member.owned[tp].position += 1  # TEST-ONLY: a position past what it read
                self.checker.processing_starts(member.pid, tp, start, end)
                self.stats["records_processed"] += end - start
            for request in member.outbox:
                self.trace.update(f"{request.pid}:{request.seq}:{request.kind}".encode())
                self._send(_Message(0, 0, True, request))
            member.outbox.clear()
        self.checker.single_owner(self.members)

    # -- the coordinator's side ------------------------------------------------------------------
    def _handle(self, request: Request) -> None:
        if self.now < self.loading_until:
            return  # COORDINATOR_LOADING: the member's request times out and is retried
        reply: object
        entries: list[bytes] = []
        try:
            if request.kind == "heartbeat":
                beat = HeartbeatRequest(
                    GROUP,
                    request.member_id,
                    request.epoch,
                    request.session_timeout_ms,
                    request.instance_id,
                    request.topics,
                    request.owned,
                )
                outcome = self.coordinator.heartbeat(beat, self.topics)
                reply, entries = outcome.reply, outcome.entries
            elif request.kind == "commit":
                reply, entries = None, self._commit_request(request)
            else:
                reply = self.coordinator.offsets(GROUP, self.topics)
            self._append(entries)
        except GroupError as error:
            reply = error
            key = "commits_fenced" if request.kind == "commit" else "heartbeats_fenced"
            self.stats[key] += 1
        self.trace.update(f"<{request.pid}:{request.seq}:{type(reply).__name__}".encode())
        self.replies.append((len(self.batches), request, reply))

    def _commit_request(self, request: Request) -> list[bytes]:
        before = self.coordinator.offsets(GROUP, self.topics)
        view = self._view()
        commit = CommitRequest(GROUP, request.member_id, request.epoch, request.offsets)
        try:
            outcome = self.coordinator.commit(commit, self.topics)
        except GroupError as error:
            after = self.coordinator.offsets(GROUP, self.topics)
            self.checker.commit_refused(before, after, str(error))
            raise
        if outcome.entries:
            self.checker.commit_accepted(view, request.member_id, request.offsets)
        self.stats["commits_accepted"] += 1
        return outcome.entries

    def _view(self) -> GroupView | None:
        if GROUP not in self.coordinator.groups():
            return None
        return self.coordinator.describe(GROUP, self.topics)

    def _append(self, entries: list[bytes]) -> None:
        if not entries:
            return
        previous = self.batches[-1].commit_at if self.batches else 0
        delay = self.rng.randint(0, self.profile.max_commit_delay_ticks)
        self.batches.append(_Batch(entries, max(previous, self.now + delay)))
        self.stats["entries"] += len(entries)
        for entry in entries:
            self.trace.update(entry)

    def _commit(self, batch: _Batch) -> None:
        for entry in batch.entries:
            self.checker.committed_entry(decode(entry))
        self.committed_batches += 1

    def _fresh_coordinator(self, entries: list[bytes]) -> Coordinator:
        coordinator = Coordinator(self.config, faults=self.faults)
        for entry in entries:
            coordinator.load(entry)
        coordinator.start()
        return coordinator

    def failover(self) -> None:
        self.stats["failovers"] += 1
        uncommitted = len(self.batches) - self.committed_batches
        survive = self.rng.randint(0, uncommitted)
        for batch in self.batches[self.committed_batches : self.committed_batches + survive]:
            self._commit(batch)
        self.stats["lost_batches"] += uncommitted - survive
        del self.batches[self.committed_batches :]
        self.replies.clear()
        self.coordinator = self._fresh_coordinator([e for b in self.batches for e in b.entries])
        self.checker.read_back(self.coordinator, GROUP, self.topics)
        self.loading_until = self.now + self.rng.randint(1, 4)
        self.trace.update(f"failover@{self.now}:{survive}".encode())

    # -- the network -----------------------------------------------------------------------------
    def _send(self, message: _Message) -> None:
        if self.now < self.quiet_at and self.rng.random() < self.profile.loss:
            self.stats["lost_messages"] += 1
            return
        self._order += 1
        message.deliver_at = self.now + self.rng.randint(0, self.profile.max_delay_ticks)
        message.order = self._order
        heapq.heappush(self.network, message)

    # -- faults ----------------------------------------------------------------------------------
    def _faults(self) -> None:
        rng, profile = self.rng, self.profile
        if rng.random() < profile.failover_chance:
            self.failover()
        if rng.random() < profile.grow_chance:
            self._grow()
        if not self._running() or rng.random() < profile.event_chance:
            running = self._running()
            choice = rng.random()
            if not running or (choice < 0.35 and len(running) < profile.max_members):
                self._join()
            elif choice < 0.55:
                member = rng.choice(running)
                static = member.instance_id is not None and rng.random() < 0.5
                member.leave(self.now, static)
                self.stats["static_leaves" if static else "leaves"] += 1
                if static:
                    self._join(member.instance_id)  # the instance restarts
            elif choice < 0.7:
                member = rng.choice(running)
                member.crash()
                self.stats["crashes"] += 1
                if member.instance_id is not None and rng.random() < 0.5:
                    self._join(member.instance_id)
            else:
                member = rng.choice(running)
                sessions = -(-member.session_timeout_ms // self.config.tick_ms)
                member.pause(self.now + sessions + rng.randint(-3, 15), self.now)
                self.stats["pauses"] += 1
                if member.queued_on_pause is not None:
                    self.stats["zombie_commits_sent"] += 1
        self.trace.update(f"t{self.now}".encode())

    def _grow(self) -> None:
        topic = self.rng.choice(sorted(self.topics))
        meta = self.topics[topic]
        added = self.rng.randint(1, 2)
        self.topics[topic] = TopicMeta(meta.uid, meta.partitions + added)
        for partition in range(meta.partitions, meta.partitions + added):
            self.high_watermarks[(topic, partition)] = 0
        self.stats["partitions_added"] += added
        self.trace.update(f"grow {topic} +{added}".encode())

    def _join(self, instance_id: str | None = None) -> None:
        pid = len(self.members)
        if instance_id is None and self.rng.random() < 0.3:
            instance_id = f"instance-{pid}"
        topics = self.rng.choice((("t0",), ("t0", "t1"), ("t1",), ("t0", "t1")))
        member = SimMember(
            pid,
            GROUP,
            topics,
            self.rng.choice(self.profile.sessions_ms),
            self.config.tick_ms,
            instance_id,
            random.Random(self.rng.getrandbits(64)),
        )
        self.members.append(member)
        self.stats["joins"] += 1

    def _quiet(self) -> None:
        for member in self.members:
            if member.state is State.PAUSED:
                member.resume_at = self.now
        if not self._running():
            self._join()

    def _running(self) -> list[SimMember]:
        return [m for m in self.members if m.state is State.RUNNING]

    # -- liveness --------------------------------------------------------------------------------
    def _subscribed(self) -> set[TopicPartition]:
        topics = {t for m in self._running() for t in m.topics}
        return {tp for tp in self.high_watermarks if tp[0] in topics}

    def _owned_by_live(self) -> set[TopicPartition]:
        """Partitions a live member is processing (not merely assigned)."""
        return {tp for m in self.members if m.active for tp in m.processing()}

    def _covered(self) -> bool:
        return self._subscribed() <= self._owned_by_live()

    def finish_stats(self) -> None:
        for member in self.members:
            self.stats["self_fenced"] += member.self_fenced_count
