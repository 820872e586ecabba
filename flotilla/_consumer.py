"""A group consumer's calls as plans (no I/O): `poll`, `commit`, `committed`, the heartbeat and
`close`, over the member's state (`flotilla._member.MemberState`) and the group calls
(`flotilla._group_plans.GroupCalls`). The sync `Consumer` and the asyncio `AsyncConsumer`
(`flotilla.consumer`) run them, so both behave alike by construction.

Besides the core's steps (`Rpc`, `Sleep`) these plans yield `Callback`: the driver calls the
user's `on_assign` / `on_revoke` with the set of partitions (and awaits it, on the asyncio side,
if it returns an awaitable). Callbacks run only inside `poll` and `close`, on the caller's thread
or task, never on the heartbeat's.

poll: reconcile first (revoked partitions: commit their positions if auto-commit, `on_revoke`,
drop; assigned ones: their committed offsets, else `start`, then `on_assign`), auto-commit if
due, then fetch from the owned partitions in turn (a different one first each poll, so none
starves) through the client's read plan, until `max_records` or `timeout_s`. A position below
the log start (retention removed it) moves to the log start or, with start="latest", the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from flotilla._checks import check_offsets, check_poll_timeout, check_read
from flotilla._core import ClientCore, Plan, Rpc, Sleep
from flotilla._group_plans import GroupCalls
from flotilla._member import MemberState
from flotilla._plans import POLL_STEP_S
from flotilla._router import decode_fetch
from flotilla.errors import (
    AuthenticationError,
    AuthorizationError,
    FencedMember,
    FlotillaError,
    InvalidArgument,
    OffsetOutOfRange,
)
from flotilla.types import Record, TopicPartition

__all__ = ["Callback", "ConsumerCore", "ConsumerPlan", "PartitionsCallback"]

T = TypeVar("T")
PartitionsCallback = Callable[[set[TopicPartition]], Any]
# How long a poll with nothing owned waits before it looks again (the heartbeat may bring some).
IDLE_STEP_S = 0.05
# An automatic commit (at a poll, or of a partition moving away) gives up after this, so a
# coordinator failover holds a poll up no longer; the next one commits what it could not.
AUTO_COMMIT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Callback:
    """A step: call `function(partitions)` (the user's on_assign or on_revoke)."""

    function: PartitionsCallback
    partitions: set[TopicPartition]


# A consumer's plan: the core's steps and `Callback`.
ConsumerPlan = Generator[Rpc | Sleep | Callback, Any, T]


class ConsumerCore:
    """One consumer's plans. `wake`: the driver's way to send a heartbeat now (after partitions
    were dropped, so they are freed at once, or to rejoin)."""

    def __init__(
        self,
        core: ClientCore,
        state: MemberState,
        *,
        start: str,
        auto_commit: bool,
        on_assign: PartitionsCallback | None,
        on_revoke: PartitionsCallback | None,
        wake: Callable[[], None],
    ) -> None:
        self.core = core
        self.groups = GroupCalls(core)
        self.state = state
        self.group = state.group
        self.start = start
        self.auto_commit = auto_commit
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.wake = wake
        self.error: FlotillaError | None = None  # a heartbeat's error no retry cures: poll raises

    # -- heartbeat --------------------------------------------------------------------------------
    def heartbeat(self) -> Plan[float]:
        """One heartbeat (a join when the member has no id); the seconds until the next."""
        request = self.state.heartbeat_request()
        if request is None:
            return self.state.heartbeat_interval_s  # lost: poll drops the partitions, then wakes us
        sent_at = time.monotonic()
        timeout_s = self.state.heartbeat_timeout_s(sent_at, self.core.timeout_s)
        try:
            reply = yield from self.groups.call(
                self.group, "GroupHeartbeat", request, timeout_s=timeout_s
            )
        except FencedMember:
            self.state.fenced()
            return self.state.heartbeat_interval_s
        except FlotillaError as error:
            self.state.check_session(time.monotonic())
            if isinstance(error, InvalidArgument | AuthenticationError | AuthorizationError):
                # e.g. a session timeout the coordinator refuses, or a caller the cluster does
                # not know or lets not consume: no retry cures it, so poll raises it
                self.error = error
            return min(self.state.heartbeat_interval_s, 0.25)
        self.state.heartbeat_ok(request, reply, sent_at)
        return self.state.heartbeat_interval_s

    def leave(self) -> Plan[None]:
        """Leaves the group (a static member: keeps its partitions for its session timeout); a
        coordinator that cannot be reached lets the session time out instead."""
        request = self.state.leave_request()
        self.state.closed = True
        if request is None:
            return
        try:
            yield from self.groups.call(
                self.group, "GroupHeartbeat", request, timeout_s=min(5.0, self.core.timeout_s)
            )
        except FlotillaError:
            pass  # fenced already, or unreachable: the session ends by itself

    # -- reconciliation -----------------------------------------------------------------------------
    def reconcile(self) -> ConsumerPlan[None]:
        """Carries out what the last heartbeat answer asked (see the module text)."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        changes = self.state.changes(time.monotonic())
        if changes.revoke:
            if self.auto_commit and not changes.lost:
                # a failure (fenced meanwhile, coordinator away) lets the partition go anyway:
                # its next owner repeats the records after its last commit, none is lost
                yield from self.commit_positions(changes.revoke, quiet=True)
            if self.on_revoke is not None:
                yield Callback(self.on_revoke, set(changes.revoke))
            self.state.drop(changes.revoke)
            self.wake()
        if changes.lost:
            self.state.rejoin()
            self.wake()
            return
        if changes.assign:
            positions, committed = yield from self.start_positions(changes.assign)
            added = self.state.add(positions, committed)
            if added and self.on_assign is not None:
                yield Callback(self.on_assign, set(added))

    def start_positions(
        self, partitions: frozenset[TopicPartition]
    ) -> Plan[tuple[dict[TopicPartition, int], dict[TopicPartition, int]]]:
        """(where to read each of `partitions` from, the committed offsets found): the
        committed offset, else the log start ("earliest") or the high watermark ("latest")."""
        topics = sorted({topic for topic, _ in partitions})
        found = yield from self.groups.fetch_offsets(self.group, topics)
        committed = {tp: offset for tp, offset in found.items() if tp in partitions}
        positions = dict(committed)
        for topic in sorted({t for t, _ in partitions - committed.keys()}):
            info = yield from self.core.describe_topic(topic)
            for p in info.partitions:
                if (topic, p.index) in partitions and (topic, p.index) not in committed:
                    positions[(topic, p.index)] = (
                        p.log_start if self.start == "earliest" else p.high_watermark
                    )
        return positions, committed

    def out_of_range(self, tp: TopicPartition, position: int) -> Plan[None]:
        """The position is outside the partition's log (retention removed it, or the topic was
        recreated): it moves to the log start, or the high watermark with start="latest"."""
        info = yield from self.core.describe_topic(tp[0])
        if tp[1] < len(info.partitions):
            p = info.partitions[tp[1]]
            low, high = p.log_start, p.high_watermark
            target = low if self.start == "earliest" or position < low else high
            if self.state.position(tp) == position:
                self.state.seek(tp, target)

    # -- poll --------------------------------------------------------------------------------------
    @staticmethod
    def check_poll(max_records: object, timeout_s: object) -> float:
        """InvalidArgument naming a bad poll argument; the timeout in seconds."""
        check_read(0, max_records)
        return check_poll_timeout(timeout_s)

    def check_open(self) -> None:
        """InvalidArgument once the consumer is closed (it left the group)."""
        if self.state.closed:
            raise InvalidArgument(
                f"this consumer of group {self.group!r} is closed (it left the group): make "
                "another with client.consumer(...)"
            )

    def poll(self, max_records: int, timeout_s: float) -> ConsumerPlan[list[Record]]:
        self.check_open()
        deadline = time.monotonic() + self.check_poll(max_records, timeout_s)
        yield from self.reconcile()
        if self.auto_commit and self.state.auto_commit_due(time.monotonic()):
            yield from self.commit_positions(None, quiet=True)
        records: list[Record] = []
        quiet = False
        while True:
            order = self.state.fetch_order()
            remaining = deadline - time.monotonic()
            wait_ms = 0
            if quiet and order:  # nothing anywhere last round: long-poll, shared out
                wait_ms = int(min(POLL_STEP_S, max(0.0, remaining)) * 1000 / len(order))
            for tp in order:
                position = self.state.position(tp)
                if position is None:
                    continue
                try:
                    response = yield from self.core.fetch(
                        tp[0], tp[1], position, max_records - len(records), None, wait_ms
                    )
                except OffsetOutOfRange:
                    yield from self.out_of_range(tp, position)
                    continue
                got = decode_fetch(response, position, max_records - len(records), *tp)
                if got and self.state.advance(tp, position, got[-1].offset + 1, time.monotonic()):
                    records.extend(got)
                if len(records) >= max_records:
                    break
            if records or time.monotonic() >= deadline:
                return records
            if not order:
                yield Sleep(min(IDLE_STEP_S, max(0.0, deadline - time.monotonic())))
            quiet = True
            yield from self.reconcile()

    # -- commits -----------------------------------------------------------------------------------
    def commit(self, offsets: object) -> ConsumerPlan[None]:
        """Commits `offsets` ({(topic, partition): next offset}), or every owned partition's
        position (None); all or nothing. FencedMember if the member does not own one of them
        or its session ended (it rejoins on the next poll)."""
        self.check_open()
        if offsets is None:
            yield from self.commit_positions(None)
            return
        chosen = check_offsets(offsets)
        self._check_session()
        owned = self.state.owned()
        foreign = sorted(set(chosen) - owned)
        if foreign:
            raise FencedMember(
                f"group {self.group!r}: this member does not own {foreign}; it owns "
                f"{sorted(owned)}; nothing was committed"
            )
        yield from self._send_commit(chosen)

    def commit_positions(
        self, partitions: frozenset[TopicPartition] | None, quiet: bool = False
    ) -> Plan[None]:
        """Commits the positions of the owned partitions (of `partitions`) that changed since
        their last commit; none changed: nothing is sent. `quiet` (auto-commit): it gives up
        after `AUTO_COMMIT_TIMEOUT_S`, and a failure is left for the next one."""
        if not quiet:
            self._check_session()
        offsets = self.state.uncommitted(partitions)
        if not offsets or self.state.lost:
            return
        try:
            yield from self._send_commit(offsets, AUTO_COMMIT_TIMEOUT_S if quiet else None)
        except FlotillaError:
            if not quiet:
                raise

    def _check_session(self) -> None:
        if self.state.check_session(time.monotonic()):
            self.wake()
            raise FencedMember(
                f"group {self.group!r}: this member's session ended (no heartbeat acknowledged "
                f"for {self.state.session_timeout_s:g} s); nothing was committed; it rejoins on "
                "its next poll"
            )

    def _send_commit(
        self, offsets: dict[TopicPartition, int], timeout_s: float | None = None
    ) -> Plan[None]:
        member_id, epoch = self.state.identity()
        if timeout_s is not None:
            timeout_s = min(timeout_s, self.core.timeout_s)
        try:
            yield from self.groups.commit(self.group, member_id, epoch, offsets, timeout_s)
        except FencedMember:
            self.state.fenced()
            raise
        self.state.committed_ok(offsets)

    def committed(self, topic: str, partition: int) -> Plan[int | None]:
        if not isinstance(topic, str) or type(partition) is not int or partition < 0:
            raise InvalidArgument(
                f"({topic!r}, {partition!r}) is not a partition: give a topic name and a "
                "partition number >= 0"
            )
        return (yield from self.groups.committed(self.group, topic, partition))

    # -- close -------------------------------------------------------------------------------------
    def close(self) -> ConsumerPlan[None]:
        """Commits (if auto-commit), calls on_revoke with what it owned, and leaves the group."""
        if self.state.closed:
            return
        owned = self.state.owned()
        try:
            if owned and self.auto_commit and not self.state.lost:
                try:
                    yield from self.commit_positions(owned)
                except FencedMember:
                    pass  # no longer the owner: its successor reads on from the last commit
            if owned and self.on_revoke is not None:
                yield Callback(self.on_revoke, set(owned))
        finally:
            self.state.drop(owned)
            yield from self.leave()

    # -- positions ---------------------------------------------------------------------------------
    def owned_position(self, topic: str, partition: int) -> int:
        position = self.state.position((topic, partition))
        if position is None:
            raise InvalidArgument(
                f"this consumer does not own {topic}/{partition}; it owns "
                f"{sorted(self.state.owned())}"
            )
        return position

    def seek(self, topic: str, partition: int, offset: int) -> None:
        check_read(offset)
        if not self.state.seek((topic, partition), offset):
            raise InvalidArgument(
                f"this consumer does not own {topic}/{partition}, so it cannot seek there; it "
                f"owns {sorted(self.state.owned())}"
            )
