"""The delayed produce path (DESIGN-26 "The node"): a Produce with `deliver_at_ms` != 0.

The batch is checked at the edge like any other, then against the delay rules: the source
topic's `max_delay_ms` and now - `PAST_TOLERANCE_MS` bound `deliver_at_ms`, and the batch's first
record must carry `flotilla-deliver-at` equal to it (INVALID_ARGUMENT naming the bound or the
header otherwise; nothing accepted). It is then appended, unchanged, to partition p of the
source topic incarnation's timer log topic (`timer_topic(uid)`, created here on the first
delayed produce with the source's partition count and replication factor; "already exists" is
fine): on this node when it leads that partition, else forwarded once to its leader as a
Produce to the timer topic carrying `TIMER_FORWARD_KEY` (the only way anything is produced to a
`__timers.*` topic: a client may neither produce to nor read one). The answer is the timer
log's (the idempotent producer's dedupe applies there) with `deliver_at_ms` set.

While a replica of the source or the timer partition runs a version older than
`cluster.versions.TIMERS_SINCE`, a delayed produce is UNAVAILABLE naming the versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping

import grpc

from cluster.controller import TopicSpec
from cluster.errors import ClusterError, Invalid, TopicExists
from cluster.replica import Replica
from cluster.timer_log import TimerLogError, deliver_at_of
from cluster.versions import TIMERS_SINCE, reads_timers
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import peek_producer
from raft.types import Role
from timers.types import DELIVER_AT_HEADER, PAST_TOLERANCE_MS, TIMER_TOPIC_PREFIX, timer_topic

__all__ = [
    "TIMER_FORWARD_KEY",
    "DelayRefused",
    "DelayedProduce",
    "check_deliver_at",
    "check_deliver_at_header",
    "is_timer_topic",
]

# A delayed batch a node forwards to the leader of its timer partition carries this metadata
# key (not a credential: the client API has none; it keeps a client from writing a timer log
# by accident).
TIMER_FORWARD_KEY = "flotilla-timer-forward"
FORWARD_TIMEOUT_S = 15.0
ROUTE_WAIT_S = 5.0  # how long a delayed produce waits for its timer partition to have a leader
ROUTE_POLL_S = 0.05


class DelayRefused(ClusterError):
    """A delayed produce that cannot be taken now (UNAVAILABLE): a rolling upgrade not finished,
    the timer partition with no leader known, its topic not created yet."""


def is_timer_topic(name: str) -> bool:
    return name.startswith(TIMER_TOPIC_PREFIX)


def check_deliver_at(
    deliver_at_ms: int, now_ms: int, spec: TopicSpec, *, past: bool = True
) -> None:
    """`Invalid` naming the bound unless now - 1 s <= deliver_at_ms <= now + max_delay_ms (the
    lower bound only when `past`: an idempotent batch's is checked by the timer partition's
    leader after its duplicate check, `check_not_past`)."""
    earliest = now_ms - PAST_TOLERANCE_MS
    latest = now_ms + spec.max_delay_ms
    if past and deliver_at_ms < earliest:
        raise Invalid(
            f"deliver_at_ms={deliver_at_ms} is {now_ms - deliver_at_ms} ms in the past: a time "
            f"at most {PAST_TOLERANCE_MS} ms in the past is due at once; valid: {earliest}.."
            f"{latest} (now - {PAST_TOLERANCE_MS} .. now + max_delay_ms={spec.max_delay_ms} "
            f"of topic {spec.name!r})"
        )
    if deliver_at_ms > latest:
        raise Invalid(
            f"deliver_at_ms={deliver_at_ms} is {deliver_at_ms - now_ms} ms ahead, beyond topic "
            f"{spec.name!r}'s max_delay_ms={spec.max_delay_ms}; valid: {earliest}..{latest} "
            "(alter the topic's max_delay_ms for longer delays)"
        )


def check_not_past(deliver_at_ms: int, now_ms: int) -> None:
    """`Invalid` if deliver_at_ms lies more than PAST_TOLERANCE_MS in the past. For an
    idempotent batch the timer partition's leader asks this only once the batch is known not to
    be a duplicate: a retry whose first attempt was accepted in time may arrive later than that
    (its answer lost, or the timer partition still electing), and is answered as a duplicate."""
    if deliver_at_ms < now_ms - PAST_TOLERANCE_MS:
        raise Invalid(
            f"deliver_at_ms={deliver_at_ms} is {now_ms - deliver_at_ms} ms in the past: a time "
            f"at most {PAST_TOLERANCE_MS} ms in the past is due at once"
        )


def check_deliver_at_header(batch: bytes, deliver_at_ms: int) -> None:
    """`Invalid` unless the batch's first record carries DELIVER_AT_HEADER = deliver_at_ms."""
    try:
        carried = deliver_at_of(batch)
    except TimerLogError as error:
        raise Invalid(f"invalid batch: {error}") from None
    if carried != deliver_at_ms:
        said = "none" if carried is None else str(carried)
        raise Invalid(
            f"the batch's first record carries {DELIVER_AT_HEADER}={said}, not deliver_at_ms="
            f"{deliver_at_ms}: every record of a delayed batch carries the header {DELIVER_AT_HEADER}"
            " = deliver_at_ms (ASCII decimal epoch ms; the SDK adds it)"
        )


class DelayedProduce:
    """Where a checked delayed batch goes: the timer partition's replica on this node (the
    caller appends to it) or its leader elsewhere (forwarded here)."""

    def __init__(
        self,
        *,
        node_id: str,
        topics: Callable[[], Mapping[str, TopicSpec]],
        create_topic: Callable[[pb.CreateTopicRequest], Awaitable[object]],
        grow_topic: Callable[[pb.AlterTopicRequest], Awaitable[object]],
        refresh_topics: Callable[[], Awaitable[None]],
        replica: Callable[[str], Replica | None],
        member_version: Callable[[str], str | None],
        stub: Callable[[str], flotilla_pb2_grpc.FlotillaStub | None],
        leader_of: Callable[[str, int], Awaitable[str | None]],
    ) -> None:
        self.node_id = node_id
        self._topics = topics
        self._create_topic = create_topic
        self._grow_topic = grow_topic
        self._refresh_topics = refresh_topics
        self._replica = replica
        self._member_version = member_version
        self._stub = stub
        self._leader_of = leader_of
        self._forwarding: dict[str, asyncio.Lock] = {}  # timer partition -> its forwards' turn

    def check(self, request: pb.ProduceRequest, spec: TopicSpec, batch: bytes) -> None:
        idempotent = bool(peek_producer(batch)[0])
        check_deliver_at(request.deliver_at_ms, int(time.time() * 1000), spec, past=not idempotent)
        check_deliver_at_header(batch, request.deliver_at_ms)
        self.check_versions(f"{request.topic}/{request.partition}")

    def check_versions(self, group: str) -> None:
        replica = self._replica(group)
        if replica is None:
            return
        old = [
            f"{member} runs {version}"
            for member in sorted(replica.node.configuration.members)
            if reads_timers(version := self._member_version(member)) is False
        ]
        if old:
            since = ".".join(map(str, TIMERS_SINCE))
            raise DelayRefused(
                f"the replicas of {group} do not all keep timers yet ({', '.join(old)}; delayed "
                f"delivery needs {since} or later): finish the rolling upgrade"
            )

    async def timer_spec(self, source: TopicSpec) -> TopicSpec:
        """The source incarnation's timer topic, created if missing, grown when the source topic
        gained partitions (a timer log per source partition)."""
        name = timer_topic(source.uid)
        spec = self._topics().get(name)
        if spec is not None and spec.partitions < source.partitions:
            await self._grow_topic(pb.AlterTopicRequest(name=name, partitions=source.partitions))
            await self._refresh_topics()
            spec = self._topics().get(name)
        if spec is not None and spec.partitions >= source.partitions:
            return spec
        request = pb.CreateTopicRequest(
            name=name, partitions=source.partitions, replication_factor=source.replication_factor
        )
        with contextlib.suppress(TopicExists):
            await self._create_topic(request)
        await self._refresh_topics()
        spec = self._topics().get(name)
        if spec is None:
            raise DelayRefused(f"the timer topic {name!r} is not in this node's table yet; retry")
        return spec

    async def route(self, timers: TopicSpec, partition: int) -> Replica | str:
        """This node's replica of the timer partition if it leads it, else the leader's id;
        waits up to `ROUTE_WAIT_S` for a leader (a timer topic just created elects its first)."""
        group = f"{timers.name}/{partition}"
        self.check_versions(group)  # every replica of the timer partition keeps timers
        deadline = time.monotonic() + ROUTE_WAIT_S
        while True:
            replica = self._replica(group)
            if replica is not None and replica.node.role is Role.LEADER:
                return replica
            leader = replica.node.leader_id if replica is not None else None
            if not leader and replica is None:
                leader = await self._leader_of(timers.name, partition)
            if leader and leader != self.node_id:
                return leader
            if time.monotonic() > deadline:
                raise DelayRefused(
                    f"no leader of the timer partition {group} is known; retry shortly"
                )
            await asyncio.sleep(ROUTE_POLL_S)

    async def forward(
        self, request: pb.ProduceRequest, timers: TopicSpec, leader: str
    ) -> pb.ProduceResponse:
        """Sends the batch to the timer partition's leader, once (its answer is the client's;
        a leader that moved meanwhile is the client's retry to find)."""
        forwarded = pb.ProduceRequest()
        forwarded.CopyFrom(request)
        forwarded.topic = timers.name
        group = f"{timers.name}/{request.partition}"
        stub = self._stub(leader)
        if stub is None:
            raise DelayRefused(f"the leader of {group}, {leader}, has no known address; retry")
        self.check_versions(group)
        timeout_s = (request.timeout_ms / 1000 or FORWARD_TIMEOUT_S) + 2
        # one forward at a time per timer partition, in the order they came: concurrent calls
        # may reach the leader in another order, and a producer's pipelined batches would then
        # be refused as out of order there (and retried after a backoff)
        lock = self._forwarding.setdefault(group, asyncio.Lock())
        async with lock:
            response: pb.ProduceResponse = await stub.Produce(
                forwarded, timeout=timeout_s, metadata=((TIMER_FORWARD_KEY, "1"),)
            )
        return response


def refusal_code(error: grpc.aio.AioRpcError) -> grpc.StatusCode:
    """The status a forwarded produce's failure is answered with: its own, but a leader that
    moved is UNAVAILABLE to the client (its partition's leader is not the one that moved)."""
    code = error.code()
    return grpc.StatusCode.UNAVAILABLE if code is grpc.StatusCode.FAILED_PRECONDITION else code
