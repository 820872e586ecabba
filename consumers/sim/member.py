"""A simulated group member: the SDK's rules (DESIGN-24.md, "Client side"), driven by ticks.

- One request of each kind (heartbeat, commit, offset fetch) in flight at a time; a reply to any
  but the latest request of its kind is ignored, and a request unanswered for `request_ticks`
  is given up (the node may still process it: that is the point).
- A heartbeat reply is the assignment: partitions not in it are *revoking* (no longer
  processed; committed, then dropped once that commit is answered or given up, and reported in
  `owned` until then); partitions new in it are *starting* (their committed offset is fetched,
  then they are processed from it, or from 0 where none: start="earliest").
- A member whose last acknowledged heartbeat was *sent* `session_ticks` ago or more considers
  its partitions lost (drops them all, uncommitted) and rejoins: the coordinator, which measures
  from when it *received* that heartbeat, cannot have handed them on yet.
- FencedMember on a heartbeat or a commit: drop everything, rejoin (member_id kept, epoch 0: the
  coordinator takes it back if it still knows the id, else names a new one).
- Paused: does nothing; what reaches it waits, and a commit it was about to send goes out the
  moment it resumes (a process frozen mid-send: the zombie the coordinator must fence).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field, replace

from consumers.types import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    FencedMember,
    GroupError,
    HeartbeatReply,
    TopicPartition,
)

__all__ = ["Phase", "Request", "SimMember", "State"]


class State(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    CRASHED = "crashed"
    LEFT = "left"


class Phase(enum.Enum):
    STARTING = "starting"  # assigned; fetching its committed offset
    PROCESSING = "processing"
    REVOKING = "revoking"  # revoked: committing its position before dropping it


@dataclass(frozen=True, slots=True)
class Request:
    """What a member sends; the world carries it to the coordinator."""

    pid: int
    seq: int
    kind: str  # "heartbeat" | "commit" | "fetch"
    member_id: str
    epoch: int
    sent_at: int
    topics: tuple[str, ...] | None = None
    owned: frozenset[TopicPartition] = frozenset()
    offsets: tuple[tuple[str, int, int], ...] = ()
    instance_id: str | None = None
    session_timeout_ms: int = 0


@dataclass(slots=True)
class _Owned:
    phase: Phase
    position: int = 0


@dataclass
class SimMember:
    pid: int
    group: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    tick_ms: int
    instance_id: str | None
    rng: random.Random
    commit_interval_ticks: int = 5
    state: State = State.RUNNING
    member_id: str = ""
    epoch: int = JOIN
    joined: bool = False  # has an acknowledged membership it considers live
    owned: dict[TopicPartition, _Owned] = field(default_factory=dict)
    last_ack_sent: int | None = None
    heartbeat_ticks: int = 1
    next_heartbeat_at: int = 0
    next_commit_at: int = 0
    resume_at: int = 0
    pending: dict[str, Request] = field(default_factory=dict)  # kind -> the one in flight
    queued_on_pause: Request | None = None
    committed_by_me: dict[TopicPartition, int] = field(default_factory=dict)
    seq: int = 0
    outbox: list[Request] = field(default_factory=list)
    started: list[tuple[TopicPartition, int]] = field(default_factory=list)  # (tp, position)
    fenced_count: int = 0
    self_fenced_count: int = 0

    @property
    def session_ticks(self) -> int:
        return -(-self.session_timeout_ms // self.tick_ms)

    @property
    def request_ticks(self) -> int:
        """How long a request waits for its reply before it is given up."""
        return max(3, self.session_ticks // 2)

    @property
    def active(self) -> bool:
        """Running and considering itself a live member: what it owns, it may process."""
        return self.state is State.RUNNING and self.joined

    def owned_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self.owned)

    def processing(self) -> dict[TopicPartition, int]:
        return {tp: o.position for tp, o in self.owned.items() if o.phase is Phase.PROCESSING}

    # -- time ------------------------------------------------------------------------------------
    def step(
        self, now: int, high_watermarks: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """One tick of work; returns the ranges it processed: tp -> (from, to)."""
        if self.state is State.PAUSED and now >= self.resume_at:
            self.state = State.RUNNING
            if self.queued_on_pause is not None:
                request = replace(self.queued_on_pause, sent_at=now)
                self.pending["commit"] = request
                self.outbox.append(request)
                self.queued_on_pause = None
        if self.state is not State.RUNNING:
            return {}
        self._check_session(now)
        for request in list(self.pending.values()):
            if now - request.sent_at >= self.request_ticks:
                self._give_up(request)
        if "heartbeat" not in self.pending and now >= self.next_heartbeat_at:
            self._send_heartbeat(now)
        processed = {}
        for tp, owned in self.owned.items():
            if owned.phase is Phase.PROCESSING:
                end = min(high_watermarks.get(tp, 0), owned.position + self.rng.randint(0, 3))
                if end > owned.position:
                    processed[tp] = (owned.position, end)
                    owned.position = end
        revoking = any(o.phase is Phase.REVOKING for o in self.owned.values())
        if "commit" not in self.pending and (revoking or now >= self.next_commit_at):
            self._send_commit(now)
        starting = [tp for tp, o in self.owned.items() if o.phase is Phase.STARTING]
        if starting and "fetch" not in self.pending and self.joined:
            self._send(now, "fetch", offsets=tuple((t, p, 0) for t, p in sorted(starting)))
        return processed

    def pause(self, until: int, now: int) -> None:
        if self.state is not State.RUNNING:
            return
        if self.joined and self.processing() and self.rng.random() < 0.5:
            # frozen between deciding to commit and sending it
            self.seq += 1
            self.queued_on_pause = Request(
                self.pid,
                self.seq,
                "commit",
                self.member_id,
                self.epoch,
                now,
                offsets=tuple((t, p, o) for (t, p), o in sorted(self.processing().items())),
            )
        self.state, self.resume_at = State.PAUSED, until

    def crash(self) -> None:
        self.state, self.joined = State.CRASHED, False
        self.owned.clear()
        self.pending.clear()

    def leave(self, now: int, static: bool) -> None:
        if self.state is not State.RUNNING:
            return
        if self.joined and self.processing():
            self._send(now, "commit", offsets=self._offsets(self.processing()))
        epoch = LEAVE_STATIC if static else LEAVE
        self._send(now, "heartbeat", epoch=epoch)
        self.state, self.joined = State.LEFT, False
        self.owned.clear()

    # -- replies ---------------------------------------------------------------------------------
    def on_reply(self, request: Request, reply: object, now: int) -> None:
        """`reply`: a HeartbeatReply, a dict of offsets (fetch), None (commit done) or a
        GroupError (refused)."""
        if self.state is not State.RUNNING or self.pending.get(request.kind) != request:
            return  # stale, or for a process that is gone
        del self.pending[request.kind]
        if isinstance(reply, FencedMember):
            self._fenced()
            return
        if isinstance(reply, GroupError):
            raise AssertionError(f"member {self.pid}: unexpected refusal {reply!r}")
        if request.kind == "heartbeat":
            assert isinstance(reply, HeartbeatReply)
            self._assigned(request, reply, now)
        elif request.kind == "commit":
            for topic, partition, offset in request.offsets:
                self.committed_by_me[(topic, partition)] = offset
            self._drop_revoked(request)
        elif request.kind == "fetch":
            assert isinstance(reply, dict)
            for topic, partition, _ in request.offsets:
                owned = self.owned.get((topic, partition))
                if owned is not None and owned.phase is Phase.STARTING:
                    owned.phase = Phase.PROCESSING
                    owned.position = reply.get((topic, partition), 0)
                    self.started.append(((topic, partition), owned.position))

    def _assigned(self, request: Request, reply: HeartbeatReply, now: int) -> None:
        if request.epoch in (LEAVE, LEAVE_STATIC):
            return
        self.member_id, self.epoch, self.joined = reply.member_id, reply.member_epoch, True
        self.last_ack_sent = request.sent_at
        self.heartbeat_ticks = max(1, reply.heartbeat_interval_ms // self.tick_ms)
        for tp, owned in list(self.owned.items()):
            if tp not in reply.assignment:
                if owned.phase is Phase.STARTING:
                    del self.owned[tp]  # never processed: nothing to commit
                else:
                    owned.phase = Phase.REVOKING
            elif owned.phase is Phase.REVOKING:
                owned.phase = Phase.PROCESSING  # assigned again before it was dropped
        for tp in reply.assignment:
            self.owned.setdefault(tp, _Owned(Phase.STARTING))

    # -- internals -------------------------------------------------------------------------------
    def _check_session(self, now: int) -> None:
        last = self.last_ack_sent
        if self.joined and last is not None and now - last >= self.session_ticks:
            self.self_fenced_count += 1
            self._fenced()

    def _fenced(self) -> None:
        self.fenced_count += 1
        self.joined, self.epoch, self.last_ack_sent = False, JOIN, None
        self.owned.clear()
        self.pending.clear()
        self.next_heartbeat_at = 0  # rejoin at once

    def _give_up(self, request: Request) -> None:
        del self.pending[request.kind]
        if request.kind == "commit":
            self._drop_revoked(request)

    def _drop_revoked(self, request: Request) -> None:
        for topic, partition, _ in request.offsets:
            owned = self.owned.get((topic, partition))
            if owned is not None and owned.phase is Phase.REVOKING:
                del self.owned[(topic, partition)]

    def _send_heartbeat(self, now: int) -> None:
        self.next_heartbeat_at = now + self.heartbeat_ticks
        if self.joined:
            self._send(now, "heartbeat", epoch=self.epoch, owned=frozenset(self.owned))
        else:
            self._send(now, "heartbeat", epoch=JOIN, topics=self.topics)

    def _send_commit(self, now: int) -> None:
        self.next_commit_at = now + self.commit_interval_ticks
        if not self.joined:
            return
        positions = {
            tp: o.position for tp, o in self.owned.items() if o.phase is not Phase.STARTING
        }
        changed = {
            tp: offset
            for tp, offset in positions.items()
            if self.committed_by_me.get(tp) != offset or self.owned[tp].phase is Phase.REVOKING
        }
        if changed:
            self._send(now, "commit", offsets=self._offsets(changed))

    @staticmethod
    def _offsets(positions: dict[TopicPartition, int]) -> tuple[tuple[str, int, int], ...]:
        return tuple((t, p, o) for (t, p), o in sorted(positions.items()))

    def _send(
        self,
        now: int,
        kind: str,
        *,
        epoch: int | None = None,
        topics: tuple[str, ...] | None = None,
        owned: frozenset[TopicPartition] = frozenset(),
        offsets: tuple[tuple[str, int, int], ...] = (),
    ) -> None:
        self.seq += 1
        request = Request(
            self.pid,
            self.seq,
            kind,
            self.member_id,
            self.epoch if epoch is None else epoch,
            now,
            topics=topics,
            owned=owned,
            offsets=offsets,
            instance_id=self.instance_id,
            session_timeout_ms=self.session_timeout_ms,
        )
        self.pending[kind] = request
        self.outbox.append(request)
