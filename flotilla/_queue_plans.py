"""A queue's calls as plans (no I/O): the heartbeat, `receive`, the four settlements and
`close`, over the member's state (`flotilla._queue.QueueState`) and the group calls
(`flotilla._group_plans.GroupCalls`: coordinator discovery and retries). The sync `Queue` and
the asyncio `AsyncQueue` (`flotilla.queue`) run them, so both behave alike by construction.

Besides the core's steps (`Rpc`, `Sleep`) these plans yield `Join`: the driver runs the
heartbeat plan (a join) now unless another is running, which it waits for: one join at a time,
whether the caller's receive or the heartbeat thread asked.

receive: QueueReceive with wait_ms = what is left of timeout_s (5 s at most per call, repeated)
until some lease comes or the time is up; then the leased offsets' records are read from the
partition's replicas, followers first and the leader last (one Fetch per contiguous run of
offsets, from a replica that committed the run), and returned as Deliveries in (partition,
offset) order. A leased offset no replica holds any more (retention deleted it) is skipped and
acked: there is nothing left to hand out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from flotilla._checks import check_poll_timeout
from flotilla._core import ClientCore, Plan, Rpc, Sleep
from flotilla._group_plans import GroupCalls
from flotilla._plans import ATTEMPT_S
from flotilla._queue import (
    MAX_SETTLEMENTS,
    LeaseKey,
    QueueState,
    check_deliveries,
    check_max_records,
    key_of,
    runs,
)
from flotilla._router import decode_fetch
from flotilla.errors import (
    AuthenticationError,
    AuthorizationError,
    FencedMember,
    FlotillaError,
    InvalidArgument,
    LeaseLost,
    OffsetOutOfRange,
    Timeout,
    TopicNotFound,
    Unavailable,
)
from flotilla.types import Delivery, Record
from proto import flotilla_pb2 as pb

__all__ = ["Join", "QueueCore", "QueuePlan"]

T = TypeVar("T")
MAX_WAIT_MS = 5_000  # one QueueReceive's server-side wait: a coordinator that dies is left soon
# One QueueReceive's deadline beyond its wait: a node looks a topic it does not know up for
# up to 2 s (one created a moment ago elsewhere) before it answers NOT_FOUND.
RECEIVE_SLACK_S = 2 * ATTEMPT_S + 2.0
JOIN_WAIT_S = 0.05  # how long a receive waits before it looks again while its member rejoins
LEAVE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Join:
    """A step: join the group now (the driver runs `QueueCore.heartbeat` under its join lock,
    unless the member has joined meanwhile)."""


QueuePlan = Generator[Rpc | Sleep | Join, Any, T]
ACTIONS = {
    "ack": pb.SETTLE_ACK,
    "release": pb.SETTLE_RELEASE,
    "reject": pb.SETTLE_REJECT,
    "extend": pb.SETTLE_EXTEND,
}


class QueueCore:
    """One queue's plans. `wake`: the driver's way to have the heartbeat run now (to rejoin)."""

    def __init__(self, core: ClientCore, state: QueueState, wake: Callable[[], None]) -> None:
        self.core = core
        self.groups = GroupCalls(core)
        self.state = state
        self.group = state.group
        self.topic = state.topic
        self.wake = wake
        self.error: FlotillaError | None = None  # a join's error no retry cures: receive raises

    # -- heartbeat ---------------------------------------------------------------------------------
    def heartbeat(self) -> Plan[float]:
        """One heartbeat (a join when the member has no id, or lost its session); the seconds
        until the next."""
        request = self.state.heartbeat_request()
        member = self.state.member
        if request is None:
            return member.heartbeat_interval_s
        sent_at = time.monotonic()
        timeout_s = member.heartbeat_timeout_s(sent_at, self.core.timeout_s)
        try:
            reply = yield from self.groups.call(
                self.group, "GroupHeartbeat", request, timeout_s=timeout_s
            )
        except FencedMember:
            self.state.lose()
            return 0.0  # rejoin at once
        except FlotillaError as error:
            self.state.check_session(time.monotonic())
            if isinstance(
                error, InvalidArgument | TopicNotFound | AuthenticationError | AuthorizationError
            ):  # e.g. a topic that does not exist, a caller not let consume it
                self.error = error
            return min(member.heartbeat_interval_s, 0.25)
        self.error = None
        member.heartbeat_ok(request, reply, sent_at)
        return member.heartbeat_interval_s

    def leave(self) -> Plan[None]:
        """Leaves the group (epoch -1): what it still held is released at once."""
        request = self.state.leave_request()
        self.state.book.clear()
        if request is None:
            return
        try:
            yield from self.groups.call(
                self.group,
                "GroupHeartbeat",
                request,
                timeout_s=min(LEAVE_TIMEOUT_S, self.core.timeout_s),
            )
        except FlotillaError:
            pass  # fenced already, or unreachable: the session ends by itself

    def check_open(self) -> None:
        if self.state.closed:
            raise InvalidArgument(
                f"this queue of group {self.group!r} is closed (it left the group): make "
                "another with client.queue(...)"
            )

    # -- receive -----------------------------------------------------------------------------------
    @staticmethod
    def check_receive(max_records: object, timeout_s: object) -> float:
        check_max_records(max_records)
        return check_poll_timeout(timeout_s)

    def receive(
        self, max_records: int, timeout_s: float, ack: object = None
    ) -> QueuePlan[list[Delivery]]:
        """`ack`: deliveries acked first, carried on the receive (one call and one coordinator
        write for both); LeaseLost, leasing nothing, when any of them was lost."""
        self.check_open()
        deadline = time.monotonic() + self.check_receive(max_records, timeout_s)
        carried = yield from self._carried_acks(ack)
        while True:
            if self.state.needs_join() or self.state.check_session(time.monotonic()):
                yield Join()
            if self.error is not None:
                error, self.error = self.error, None
                if carried:  # acked as `ack` would, before the error is told
                    acked, carried = carried, []
                    yield from self.settle(acked, "ack")
                raise error
            member_id, epoch = self.state.identity()
            remaining = deadline - time.monotonic()
            if carried and (not member_id or self.state.member.lost):
                acked, carried = carried, []
                yield from self.settle(acked, "ack")  # LeaseLost: the session ended
            if not member_id or self.state.member.lost:
                if remaining <= 0:
                    return []
                yield Sleep(min(JOIN_WAIT_S, remaining))
                continue
            wait_ms = int(min(MAX_WAIT_MS, max(0.0, remaining) * 1000))
            request = self.state.receive_request(member_id, epoch, max_records, wait_ms)
            if carried:
                request.settlements.extend(self._ack_settlements(carried))
            try:
                response = yield from self.groups.call(
                    self.group,
                    "QueueReceive",
                    request,
                    timeout_s=max(0.0, remaining) + self.core.timeout_s,
                    attempt_s=wait_ms / 1000 + RECEIVE_SLACK_S,
                )
            except FencedMember:
                self.state.lose()
                self.wake()
                if carried:  # the session ended: nothing was applied
                    self._raise_lost(carried, [], carried)
                if time.monotonic() >= deadline:
                    return []
                continue
            if carried:
                acked, carried = carried, []
                if not response.settled:  # a node of an earlier release ignored them
                    yield from self.settle(acked, "ack")
                else:
                    wanted = {(key_of(d), d.delivery_count): d for d in acked}
                    applied = self._applied(response, wanted, "ack")
                    lost = [
                        d
                        for lease in response.lost
                        if (d := wanted.get(((lease.topic, lease.partition, lease.offset),
                                             lease.delivery_count))) is not None
                    ]  # fmt: skip
                    if lost:
                        self._raise_lost(lost, applied, acked)
            if response.leases:
                self.state.book.add(response.leases)
                deliveries = yield from self.read(list(response.leases))
                if deliveries:
                    return deliveries
            if time.monotonic() >= deadline:
                return []

    def read(self, leases: Sequence[pb.QueueLease]) -> Plan[list[Delivery]]:
        """The leased records, read from replicas (followers first), as Deliveries in
        (partition, offset) order; leases of records no replica holds any more are acked."""
        by_partition: dict[tuple[str, int], dict[int, pb.QueueLease]] = {}
        for lease in leases:
            by_partition.setdefault((lease.topic, lease.partition), {})[lease.offset] = lease
        deliveries: list[Delivery] = []
        gone: list[Delivery] = []
        unread: list[Delivery] = []
        for (topic, partition), leased in sorted(by_partition.items()):
            found: dict[int, Record] = {}
            deleted_below = 0
            for start, end in runs(list(leased)):
                try:
                    low = yield from self.read_run(topic, partition, start, end, found)
                except (Unavailable, Timeout):
                    continue  # no replica served them in time: given back below
                deleted_below = max(deleted_below, low)
            for offset, lease in sorted(leased.items()):
                record = found.get(offset)
                if record is not None:
                    deliveries.append(Delivery(record, lease.delivery_count, lease.deadline_ms))
                    continue
                placeholder = Record(offset, None, b"", (), 0, topic, partition)
                d = Delivery(placeholder, lease.delivery_count, lease.deadline_ms)
                # below the log start: deleted by retention, settled as acked; else no replica
                # served it in time: given back at once, for this or another receiver
                (gone if offset < deleted_below else unread).append(d)
        for chosen, action in ((gone, "ack"), (unread, "release")):
            if chosen:
                try:
                    yield from self.settle(chosen, action)
                except FlotillaError:
                    pass  # lost meanwhile, or the coordinator is away: its deadline passes
        return deliveries

    def read_run(
        self, topic: str, partition: int, start: int, end: int, found: dict[int, Record]
    ) -> Plan[int]:
        """Reads offsets [start, end) of the partition into `found` (from a replica that has
        committed up to `end`); the partition's log start if the run begins below it (those
        offsets were deleted by retention), else 0."""
        offset, log_start = start, 0
        while offset < end:
            try:
                response = yield from self.core.fetch(
                    topic, partition, offset, end - offset, None,
                    min_high_watermark=end, followers_first=True,
                )  # fmt: skip
            except OffsetOutOfRange:
                info = yield from self.core.describe_topic(topic)
                log_start = info.partitions[partition].log_start
                if log_start <= offset:
                    return 0  # a replica's view we cannot explain: the run is given back
                offset = log_start
                continue
            got = decode_fetch(response, offset, end - offset, topic, partition)
            if not got:
                break  # no replica has them: they are given back
            for record in got:
                found[record.offset] = record
            offset = got[-1].offset + 1
        return log_start

    # -- settlements -------------------------------------------------------------------------------
    def settle(
        self, deliveries: object, action: str, *, delay_ms: int = 0, invisible_ms: int = 0
    ) -> Plan[list[Delivery]]:
        """Settles each delivery on its own; the applied ones (an extend's with their new
        deadlines). LeaseLost names those not applied, after the others were."""
        chosen = check_deliveries(deliveries)
        self.state.check_session(time.monotonic())
        held, lost = self.state.book.split(chosen)
        applied: list[Delivery] = []
        wanted = {(key_of(d), d.delivery_count): d for d in held}
        requests = self.state.settle_requests(
            held, ACTIONS[action], delay_ms=delay_ms, invisible_ms=invisible_ms
        )
        for request in requests:
            try:
                response = yield from self.groups.call(self.group, "QueueSettle", request)
            except FencedMember:
                self.state.lose()
                self.wake()
                lost.extend(
                    wanted[((s.topic, s.partition, s.offset), s.delivery_count)]
                    for s in request.settlements
                )
                continue
            applied.extend(self._applied(response, wanted, action))
            lost.extend(
                d
                for lease in response.lost
                if (d := wanted.get(((lease.topic, lease.partition, lease.offset),
                                     lease.delivery_count))) is not None
            )  # fmt: skip
        if lost:
            lost.sort(key=lambda d: (d.topic, d.partition, d.offset))
            self.state.book.forget((key_of(d), d.delivery_count) for d in lost)
            raise LeaseLost(_lost_text(self.group, action, lost, len(applied)), lost)
        return applied

    def _carried_acks(self, ack: object) -> Plan[list[Delivery]]:
        """The held deliveries of `ack` to carry on a receive. Those this receiver knows lost
        already (or more than one settle call's worth) are acked with QueueSettle first, as
        `ack` would: LeaseLost names the lost ones."""
        if ack is None:
            return []
        chosen = check_deliveries(ack)
        if not chosen:
            return []
        self.state.check_session(time.monotonic())
        held, lost = self.state.book.split(chosen)
        if lost or len(held) > MAX_SETTLEMENTS or not self.state.identity()[0]:
            yield from self.settle(chosen, "ack")
            return []
        return held

    def _ack_settlements(self, deliveries: Sequence[Delivery]) -> list[pb.QueueSettlement]:
        (request,) = self.state.settle_requests(deliveries, ACTIONS["ack"])
        return list(request.settlements)

    def _raise_lost(
        self, lost: list[Delivery], applied: Sequence[Delivery], asked: Sequence[Delivery]
    ) -> None:
        lost.sort(key=lambda d: (d.topic, d.partition, d.offset))
        self.state.book.forget((key_of(d), d.delivery_count) for d in lost)
        raise LeaseLost(_lost_text(self.group, "ack", lost, len(applied)), lost)

    def _applied(
        self,
        response: pb.QueueSettleResponse | pb.QueueReceiveResponse,
        wanted: dict[tuple[LeaseKey, int], Delivery],
        action: str,
    ) -> list[Delivery]:
        applied: list[Delivery] = []
        for lease in response.applied:
            key = (lease.topic, lease.partition, lease.offset)
            d = wanted.get((key, lease.delivery_count))
            if d is None:
                continue
            if action == "extend":
                self.state.book.extended(key, lease.delivery_count, lease.deadline_ms)
                d = replace(d, deadline_ms=lease.deadline_ms)
            else:
                self.state.book.forget([(key, lease.delivery_count)])
            applied.append(d)
        return applied

    # -- close -------------------------------------------------------------------------------------
    def close(self) -> Plan[None]:
        """Releases every lease it holds (at once: no delay), then leaves the group."""
        if self.state.closed:
            return
        try:
            held = self.state.book.held()
            if held and not self.state.member.lost:
                member_id, epoch = self.state.identity()
                for start in range(0, len(held), 10_000):
                    request = pb.QueueSettleRequest(
                        group=self.group,
                        member_id=member_id,
                        member_epoch=epoch,
                        settlements=[
                            pb.QueueSettlement(
                                topic=t, partition=p, offset=o, delivery_count=count,
                                action=pb.SETTLE_RELEASE,
                            )
                            for (t, p, o), count in held[start : start + 10_000]
                        ],
                    )  # fmt: skip
                    try:
                        yield from self.groups.call(
                            self.group, "QueueSettle", request,
                            timeout_s=min(LEAVE_TIMEOUT_S, self.core.timeout_s),
                        )  # fmt: skip
                    except FlotillaError:
                        break  # the leave below releases them too
        finally:
            yield from self.leave()


def _lost_text(group: str, action: str, lost: list[Delivery], applied: int) -> str:
    shown = ", ".join(f"{d.topic}/{d.partition}@{d.offset}" for d in lost[:5])
    more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
    return (
        f"group {group!r}: {action} not applied to {len(lost)} deliveries ({shown}{more}): their "
        "leases expired, moved to another receiver or were settled already, or this receiver's "
        f"session ended; nothing changed for them ({applied} others were applied)"
    )
