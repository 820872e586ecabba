"""The queue calls of the client service (QueueReceive, QueueSettle): a mixin of
`cluster.service.ClientService` beside `cluster.groups_service.GroupCalls`, whose routing and
status mapping they share (NOT_COORDINATOR with a hint, COORDINATOR_LOADING, FENCED_MEMBER,
NOT_FOUND for an unknown topic, UNAVAILABLE while a replica of the group's `__groups` partition
runs a version without queue entries).

A bad field is refused here (INVALID_ARGUMENT naming it and its valid range) before any
coordinator is asked, and changes nothing.

A receive gives the core each partition's extent (`cluster.queue_source`: a local replica's log
start and committed high watermark, else the metadata view's) and, for a key-ordered group, the
keys of the window of fresh offsets it will look at (`Coordinator.queue_key_window`, read before
the call). A receive that hands out nothing asks again on each coordinator tick until `wait_ms`
passed: an empty receive writes nothing to Raft. A receive may carry settlements of earlier
leases (`QueueReceiveRequest.settlements`, checked as QueueSettle's): they are applied first, in
the same round, so the acks and the new leases are one write; when any is lost nothing is
leased; and such a receive is answered after that one round (`settled`, with what was applied
and lost), the client asking again, without them, to wait for more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, NoReturn

import grpc

from cluster.authz import Operation
from cluster.errors import Invalid
from cluster.groups_service import GroupCalls, _group_name
from cluster.queue_checks import check_receive, check_settle
from cluster.queue_source import SourceUnavailable
from cluster.statuses import abort
from consumers import Coordinator, GroupError, Outcome, TopicMeta
from consumers.queue_types import Extent, Lease, ReceiveRequest, SettleReply, SettleRequest
from proto import flotilla_pb2 as pb
from proto.groups import group_partition

__all__ = ["QueueCalls"]

# Keys read per partition before a key-ordered receive, at most.
MAX_KEY_WINDOW = 2_000


def _leases(leases: Any) -> list[pb.QueueLease]:
    return [
        pb.QueueLease(
            topic=lease.topic,
            partition=lease.partition,
            offset=lease.offset,
            delivery_count=lease.delivery_count,
            deadline_ms=lease.deadline_ms,
        )
        for lease in sorted(leases, key=lambda lease: (lease.topic, lease.partition, lease.offset))
    ]


class QueueCalls(GroupCalls):
    """QueueReceive and QueueSettle (proto/flotilla.proto states them), beside the group calls
    whose routing (`_on_coordinator`) they use."""

    async def QueueReceive(
        self, request: pb.QueueReceiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.QueueReceiveResponse:
        settling = sorted({s.topic for s in request.settlements} - {request.topic})
        await self._allow(context, Operation.CONSUME, request.topic, *settling)
        group = await _group_name(request.group, context)
        await _checked(context, check_receive, request)
        settle: SettleRequest | None = None
        if request.settlements:  # acks of earlier leases, first, in the same round
            carried = pb.QueueSettleRequest(settlements=request.settlements)
            settle = SettleRequest(
                group, request.member_id, request.member_epoch,
                await _checked(context, check_settle, carried),
            )  # fmt: skip
        receive = ReceiveRequest(
            group,
            request.member_id,
            request.member_epoch,
            request.topic,
            request.max_records,
            request.invisible_ms,
        )
        count = await self._groups_partitions(context)
        partition = group_partition(group, count)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.wait_ms / 1000
        named = frozenset({request.topic})
        if request.topic not in self.node.topics:  # created a moment ago through another node?
            await self._look_for_topics(named, wait=True)
        while True:
            extents = await self.node.groups.source.extents(request.topic)
            keys = await self._keys(partition, group, extents, request.max_records)

            def run(
                coordinator: Coordinator,
                topics: Mapping[str, TopicMeta],
                extents: Mapping[tuple[str, int], Extent] = extents,
                keys: dict[tuple[str, int], dict[int, bytes | None]] | None = keys,
                settle: SettleRequest | None = settle,
            ) -> Any:
                now_ms = int(time.time() * 1000)
                if settle is None:
                    received = coordinator.queue_receive(receive, topics, extents, now_ms, keys)
                    return Outcome((received.reply, None), received.entries)
                # the settlements first (they raise, changing nothing, for a fenced member);
                # their entries are written whatever the receive then decides
                outcome = coordinator.queue_settle(settle, topics, now_ms)
                settled, entries = outcome.reply, list(outcome.entries)
                if settled.lost:  # the caller learns which first; nothing is leased
                    return Outcome(([], settled), entries)
                try:
                    received = coordinator.queue_receive(receive, topics, extents, now_ms, keys)
                except GroupError:  # answered by the caller's next receive, which asks alone
                    return Outcome(([], settled), entries)
                return Outcome((received.reply, settled), [*entries, *received.entries])

            leases: list[Lease]
            settled: SettleReply | None
            leases, settled = await self._on_coordinator(
                context, group, run, partition, named=named, queue=True
            )
            remaining = deadline - loop.time()
            if settled is not None:  # one round only: the acks are answered at once
                response = pb.QueueReceiveResponse(leases=_leases(leases), settled=True)
                response.applied.extend(_leases(settled.applied))
                response.lost.extend(_leases(settled.lost))
                return response
            if leases or remaining <= 0:
                return pb.QueueReceiveResponse(leases=_leases(leases))
            await self.node.groups.next_tick(remaining)

    async def QueueSettle(
        self, request: pb.QueueSettleRequest, context: grpc.aio.ServicerContext
    ) -> pb.QueueSettleResponse:
        topics = sorted({s.topic for s in request.settlements})
        await self._allow(context, Operation.CONSUME if topics else None, *topics)
        group = await _group_name(request.group, context)
        settlements = await _checked(context, check_settle, request)
        settle = SettleRequest(group, request.member_id, request.member_epoch, settlements)

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.queue_settle(settle, topics, int(time.time() * 1000))

        named = frozenset(s.topic for s in settlements)
        reply: SettleReply = await self._on_coordinator(
            context, group, run, named=named, wait=True, queue=True
        )
        return pb.QueueSettleResponse(applied=_leases(reply.applied), lost=_leases(reply.lost))

    async def _keys(
        self,
        partition: int,
        group: str,
        extents: Mapping[tuple[str, int], Extent],
        max_records: int,
    ) -> dict[tuple[str, int], dict[int, bytes | None]] | None:
        """The keys of each partition's next window, for a key-ordered group (None if it is
        not one, or this node does not serve its coordinator now: the call says why)."""
        coordinator = self.node.groups.coordinator(partition)
        if coordinator is None:
            return None
        keys: dict[tuple[str, int], dict[int, bytes | None]] = {}
        limit = min(max_records, MAX_KEY_WINDOW)
        specs = self.node.topics
        for (topic, index), extent in sorted(extents.items()):
            spec = specs.get(topic)
            uid = spec.uid if spec is not None else None
            try:
                window = coordinator.queue_key_window(group, topic, index, extent, limit, uid)
            except GroupError:
                return None  # the call refuses it, naming the reason
            if not window:
                continue
            try:
                keys[(topic, index)] = await self.node.groups.source.keys(topic, index, window)
            except SourceUnavailable:
                keys[(topic, index)] = {}  # none read now: its fresh records wait
        return keys or None


async def _checked(context: grpc.aio.ServicerContext, check: Any, request: Any) -> Any:
    try:
        return check(request)
    except Invalid as error:
        await _invalid(context, str(error))


async def _invalid(context: grpc.aio.ServicerContext, message: str) -> NoReturn:
    await abort(context, grpc.StatusCode.INVALID_ARGUMENT, message)
