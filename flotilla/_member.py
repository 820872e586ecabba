"""One consumer-group member's state, with no I/O and no clock of its own: the caller passes
`now` (monotonic seconds) and the coordinator's answers, and asks what to send and what to do.

    identity:    member_id ("" until the coordinator names it), epoch (0 to join)
    target:      the assignment of the last heartbeat answer: what the member may own
    positions:   the partitions it owns -> the next offset to read (owned = positions' keys)
    committed:   per owned partition, the offset last committed (or found committed)

Reconciliation (`changes`, run by `poll` on the caller's thread, where callbacks belong):
revoke = owned - target (commit them if auto-commit, call on_revoke, `drop`; the next heartbeat
reports them gone, which frees them for their new owner); assign = target - owned (look up
their committed offsets, `add`, call on_assign). Until a revoked partition is dropped the member
keeps reporting it owned, so the coordinator gives it to no one else.

Session: a member whose last acknowledged heartbeat was *sent* `session_timeout_ms` ago or more
considers its session over (the coordinator, which measures from when it *received* it, can only
end it later): it is `lost` — it fetches nothing more, revokes everything without committing
(it can no longer), and rejoins with member id "" and epoch 0. A FENCED_MEMBER answer does the
same. While lost, no heartbeat goes out until the partitions are dropped.

Thread-safe: the sync consumer heartbeats from its own thread while the caller polls; every
method holds the state's lock for its few steps (no I/O under it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from flotilla.types import TopicPartition
from proto import flotilla_pb2 as pb

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "JOIN",
    "LEAVE",
    "LEAVE_STATIC",
    "Changes",
    "MemberState",
]

# member_epoch values with a meaning of their own (GroupHeartbeatRequest)
JOIN = 0
LEAVE = -1
LEAVE_STATIC = -2
DEFAULT_HEARTBEAT_INTERVAL_S = 0.5  # until the coordinator's first answer says otherwise


@dataclass(frozen=True, slots=True)
class Changes:
    """What a reconciliation is to do: stop reading `revoke` (committing them first unless the
    session is `lost`), start reading `assign`."""

    revoke: frozenset[TopicPartition]
    assign: frozenset[TopicPartition]
    lost: bool = False


NOTHING = Changes(frozenset(), frozenset())


class MemberState:
    """See the module text. `session_timeout_ms` as the member asks the coordinator for;
    `auto_commit_interval_ms`: how often `auto_commit_due` says yes."""

    def __init__(
        self,
        group: str,
        topics: tuple[str, ...],
        *,
        session_timeout_ms: int,
        instance_id: str | None,
        auto_commit_interval_ms: int,
        now: float,
    ) -> None:
        self.group = group
        self.topics = topics
        self.instance_id = instance_id
        self.session_timeout_s = session_timeout_ms / 1000
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.member_id = ""
        self.epoch = JOIN
        self.heartbeat_interval_s = DEFAULT_HEARTBEAT_INTERVAL_S
        self.target: frozenset[TopicPartition] | None = None
        self.positions: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.lost = False
        self.closed = False
        self._acked_sent_at: float | None = None  # when the last acknowledged heartbeat was sent
        self._topics_sent = False
        self._last_auto_commit = now
        self._rotation = 0
        self._lock = threading.Lock()

    # -- heartbeats --------------------------------------------------------------------------------
    def heartbeat_request(self) -> pb.GroupHeartbeatRequest | None:
        """The next heartbeat (a join while the member has no id), or None while there is none to
        send: the session is lost and the partitions not yet dropped, or the member closed."""
        with self._lock:
            if self.lost or self.closed:
                return None
            request = pb.GroupHeartbeatRequest(
                group=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch,
                instance_id=self.instance_id or "",
                owned=[pb.TopicPartition(topic=t, partition=p) for t, p in sorted(self.positions)],
                session_timeout_ms=int(self.session_timeout_s * 1000),
            )
            if self._topics_sent and self.member_id:
                request.topics_unchanged = True
            else:
                request.topics.extend(self.topics)
            return request

    def leave_request(self) -> pb.GroupHeartbeatRequest | None:
        """The heartbeat that leaves the group (None if the member never joined): epoch -1, its
        partitions move at once; a static member's -2 keeps them for its session timeout."""
        with self._lock:
            if not self.member_id or self.lost:
                return None
            return pb.GroupHeartbeatRequest(
                group=self.group,
                member_id=self.member_id,
                member_epoch=LEAVE_STATIC if self.instance_id else LEAVE,
                instance_id=self.instance_id or "",
                topics_unchanged=True,
            )

    def heartbeat_ok(
        self, request: pb.GroupHeartbeatRequest, reply: pb.GroupHeartbeatResponse, sent_at: float
    ) -> None:
        """The coordinator answered `request` (sent at `sent_at`) with `reply`."""
        with self._lock:
            if self.lost or self.closed or request.member_id != self.member_id:
                return  # an answer to a member that is no more (fenced, or rejoined since)
            self.member_id = reply.member_id
            self.epoch = reply.member_epoch
            self.target = frozenset((tp.topic, tp.partition) for tp in reply.assignment)
            if reply.heartbeat_interval_ms:
                self.heartbeat_interval_s = reply.heartbeat_interval_ms / 1000
            self._acked_sent_at = sent_at
            self._topics_sent = True

    def fenced(self) -> None:
        """The coordinator refused the member (FENCED_MEMBER): its session is over."""
        with self._lock:
            self._lose()

    def check_session(self, now: float) -> bool:
        """Has the session ended by the member's own clock? (It then is `lost`.)"""
        with self._lock:
            return self._session_over(now)

    def _session_over(self, now: float) -> bool:
        if (
            not self.lost
            and self.member_id
            and self._acked_sent_at is not None
            and now - self._acked_sent_at >= self.session_timeout_s
        ):
            self._lose()
        return self.lost

    def heartbeat_timeout_s(self, now: float, ceiling_s: float) -> float:
        """How long the next heartbeat may take: no longer than what is left of the session (a
        later answer could not save it), at most `ceiling_s`, at least a second."""
        with self._lock:
            if self._acked_sent_at is None:
                return ceiling_s
            left = self._acked_sent_at + self.session_timeout_s - now
            return max(1.0, min(ceiling_s, left))

    def _lose(self) -> None:
        self.lost = True
        self.target = None

    # -- reconciliation ------------------------------------------------------------------------------
    def changes(self, now: float) -> Changes:
        """What the caller's `poll` is to do now (see the module text)."""
        self.check_session(now)
        with self._lock:
            owned = frozenset(self.positions)
            if self.lost:
                return Changes(owned, frozenset(), lost=True)
            if self.target is None:
                return NOTHING
            return Changes(owned - self.target, self.target - owned)

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """The member no longer owns `partitions` (the next heartbeat says so)."""
        with self._lock:
            for tp in partitions:
                self.positions.pop(tp, None)
                self.committed.pop(tp, None)

    def rejoin(self) -> None:
        """After a lost session's partitions were dropped: join afresh (a static member with the
        same instance_id, which replaces its old member id)."""
        with self._lock:
            self.positions.clear()
            self.committed.clear()
            self.member_id, self.epoch = "", JOIN
            self.lost = False
            self.target = None
            self._acked_sent_at = None
            self._topics_sent = False

    def add(
        self, positions: dict[TopicPartition, int], committed: dict[TopicPartition, int]
    ) -> frozenset[TopicPartition]:
        """Starts owning the partitions of `positions` (next offset to read) that the target
        still holds (it may have moved on while their offsets were looked up); `committed`: their
        committed offsets, where any. Returns the partitions added."""
        with self._lock:
            if self.lost or self.target is None:
                return frozenset()
            added = frozenset(
                tp for tp in positions if tp in self.target and tp not in self.positions
            )
            for tp in added:
                self.positions[tp] = positions[tp]
                if tp in committed:
                    self.committed[tp] = committed[tp]
            return added

    # -- positions -----------------------------------------------------------------------------------
    def owned(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self.positions)

    def position(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self.positions.get(tp)

    def seek(self, tp: TopicPartition, offset: int) -> bool:
        """Moves an owned partition's position; False if the member does not own it."""
        with self._lock:
            if tp not in self.positions:
                return False
            self.positions[tp] = offset
            return True

    def advance(self, tp: TopicPartition, fetched_at: int, next_offset: int, now: float) -> bool:
        """Records read from `fetched_at` up to `next_offset` are to be delivered `now`: the
        position moves there, if it is still `fetched_at` (not sought, not revoked meanwhile)
        and the session has not ended by `now` (a member paused while its fetch was out may no
        longer own the partition). False: drop them."""
        with self._lock:
            if self._session_over(now) or self.positions.get(tp) != fetched_at:
                return False
            self.positions[tp] = next_offset
            return True

    def fetch_order(self) -> list[TopicPartition]:
        """The owned partitions in the order the next poll reads them: each poll starts one
        further along, so a busy partition cannot starve the others."""
        with self._lock:
            if self.lost:
                return []
            owned = sorted(self.positions)
            if not owned:
                return []
            self._rotation = (self._rotation + 1) % len(owned)
            return owned[self._rotation :] + owned[: self._rotation]

    # -- commits -------------------------------------------------------------------------------------
    def uncommitted(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """The positions of owned partitions (of `partitions`, if given) that differ from what
        is committed: what a commit of the positions sends (only what changed)."""
        with self._lock:
            chosen = self.positions if partitions is None else partitions
            return {
                tp: self.positions[tp]
                for tp in chosen
                if tp in self.positions and self.committed.get(tp) != self.positions[tp]
            }

    def committed_ok(self, offsets: dict[TopicPartition, int]) -> None:
        with self._lock:
            for tp, offset in offsets.items():
                if tp in self.positions:
                    self.committed[tp] = offset

    def auto_commit_due(self, now: float) -> bool:
        """True (and the interval starts again) once `auto_commit_interval_ms` has passed."""
        with self._lock:
            if now - self._last_auto_commit < self.auto_commit_interval_s:
                return False
            self._last_auto_commit = now
            return True

    def identity(self) -> tuple[str, int]:
        with self._lock:
            return self.member_id, self.epoch
