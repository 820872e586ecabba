"""The consumer-group calls of the client service: a mixin of `cluster.service.ClientService`
(one servicer, one registration: gRPC serves a service from one handler), kept in its own module.

Each call finds the group's coordinator partition (`proto.groups.group_partition`, creating
`__groups` on the first group call to a cluster), runs its request on this node's coordinator of
that partition (`cluster.groups.GroupHost`) and turns the outcome into a status:

    NotCoordinator          FAILED_PRECONDITION, reason NOT_COORDINATOR, `flotilla-leader` hint
    CoordinatorLoading      UNAVAILABLE, reason COORDINATOR_LOADING (retry shortly)
    CoordinatorUnavailable  UNAVAILABLE (a write failed or its outcome is unknown: retry)
    FencedMember            FAILED_PRECONDITION, reason FENCED_MEMBER
    GroupNotFound           NOT_FOUND, reason GROUP_NOT_FOUND
    GroupNotEmpty           FAILED_PRECONDITION, reason GROUP_NOT_EMPTY
    InvalidGroupRequest     INVALID_ARGUMENT
    UnknownTopic            NOT_FOUND naming it (commit, reset: looked for a while first)
    (a queue call, or a queue group's heartbeat, while a replica of the group's `__groups`
    partition runs a version without queue entries: UNAVAILABLE naming the versions)

A bad field is refused here, before any coordinator is asked, and changes nothing. A queue
group (kind QUEUE) joins with its options (`queue`, checked by `cluster.queue_checks`); its
describe carries them and each partition's queue state; its calls are `cluster.queues_service`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import grpc

from cluster.acl_service import SecurityCalls
from cluster.authz import Operation
from cluster.errors import Invalid
from cluster.failstop import NodeFailStopped
from cluster.groups import CoordinatorLoading, CoordinatorUnavailable, NotCoordinator, Op
from cluster.groups_gauges import group_lag, high_watermarks
from cluster.node_api import NodeApi
from cluster.queue_checks import queue_options, queue_options_pb
from cluster.statuses import abort
from consumers import (
    CommitRequest,
    Coordinator,
    FencedMember,
    GroupError,
    GroupNotEmpty,
    GroupNotFound,
    GroupView,
    HeartbeatReply,
    HeartbeatRequest,
    TopicMeta,
    UnknownTopic,
)
from consumers.queue_types import QUEUE
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, group_partition
from proto.reasons import (
    COORDINATOR_LOADING,
    FENCED_MEMBER,
    GROUP_NOT_EMPTY,
    GROUP_NOT_FOUND,
    NOT_COORDINATOR,
)

__all__ = ["GroupCalls"]

log = logging.getLogger("flotilla.service")

# How long a commit or reset naming a topic this node does not know looks for it, and how often.
UNKNOWN_TOPIC_WAIT_S = 2.0
UNKNOWN_TOPIC_POLL_S = 0.1

GROUP_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
KINDS = {pb.GROUP_KIND_STREAM: "stream", pb.GROUP_KIND_QUEUE: "queue"}


class GroupCalls(SecurityCalls):
    """The seven group RPCs of `flotilla.v1.Flotilla` (proto/flotilla.proto states them);
    each is authorized first (`SecurityCalls._allow`): consume on the topics it names, admin
    to reset (on the topic) or delete (on "*") a group's offsets."""

    node: NodeApi

    async def GroupHeartbeat(
        self, request: pb.GroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.GroupHeartbeatResponse:
        # topics_unchanged: the member's topics were authorized when it named them
        await self._allow(context, Operation.CONSUME if request.topics else None, *request.topics)
        group = await _group_name(request.group, context)
        kind = KINDS.get(request.kind)
        if kind is None:
            valid = ", ".join(pb.GroupKind.Name(k) for k in KINDS)
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"kind={request.kind} is invalid: use one of {valid}",
            )
        options = None
        if request.HasField("queue"):
            try:
                if kind != QUEUE:
                    raise Invalid(f"queue: options are for kind GROUP_KIND_QUEUE, not {kind}")
                options = queue_options(request.queue, group, list(request.topics))
            except Invalid as error:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
        heartbeat = HeartbeatRequest(
            group=group,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            session_timeout_ms=request.session_timeout_ms,  # 0: the coordinator's default
            instance_id=request.instance_id or None,
            topics=None if request.topics_unchanged else tuple(request.topics),
            owned=frozenset((tp.topic, tp.partition) for tp in request.owned),
            kind=kind,
            queue=options,
        )

        def beat(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.heartbeat(heartbeat, topics)

        reply: HeartbeatReply = await self._on_coordinator(
            context, group, beat, queue=kind == QUEUE
        )
        return pb.GroupHeartbeatResponse(
            member_id=reply.member_id,
            member_epoch=reply.member_epoch,
            assignment=[
                pb.TopicPartition(topic=t, partition=p) for t, p in sorted(reply.assignment)
            ],
            heartbeat_interval_ms=reply.heartbeat_interval_ms,
        )

    async def CommitOffsets(
        self, request: pb.CommitOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitOffsetsResponse:
        topics = sorted({o.topic for o in request.offsets})
        await self._allow(context, Operation.CONSUME if topics else None, *topics)
        group = await _group_name(request.group, context)
        offsets = tuple((o.topic, o.partition, o.offset) for o in request.offsets)
        commit = CommitRequest(group, request.member_id, request.member_epoch, offsets)

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.commit(commit, topics)

        named = frozenset(topic for topic, _, _ in offsets)
        await self._on_coordinator(context, group, run, named=named, wait=True)
        return pb.CommitOffsetsResponse()

    async def FetchOffsets(
        self, request: pb.FetchOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchOffsetsResponse:
        await self._allow(context, Operation.CONSUME if request.topics else None, *request.topics)
        group = await _group_name(request.group, context)
        only = frozenset(request.topics)

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.offsets(group, topics, only)

        offsets: dict[tuple[str, int], int] = await self._on_coordinator(
            context, group, run, named=only
        )
        return pb.FetchOffsetsResponse(
            offsets=[
                pb.PartitionOffset(topic=topic, partition=partition, offset=offset)
                for (topic, partition), offset in sorted(offsets.items())
            ]
        )

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        await self._allow(context)
        count = await self._groups_partitions(context)
        if request.partition >= count:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"partition={request.partition} is invalid: {GROUPS_TOPIC} has partitions "
                f"0..{count - 1}",
            )

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.groups()

        names: list[str] = await self._on_coordinator(context, "", run, request.partition)
        return pb.ListGroupsResponse(names=sorted(names))

    async def DescribeGroup(
        self, request: pb.DescribeGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.GroupInfo:
        await self._allow(context)
        group = await _group_name(request.group, context)

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.describe(group, topics)  # a queue group's: `queue_view`

        view: GroupView = await self._on_coordinator(context, group, run)
        names = sorted({p.topic for p in view.partitions} & set(self.node.topics))
        marks = high_watermarks(await self.node.metadata(names)) if names else {}
        info = pb.GroupInfo(name=view.name, kind=view.kind, coordinator=self.node.config.node_id)
        if view.queue_options is not None:
            info.queue.CopyFrom(queue_options_pb(view.queue_options))
        queues = {(q.topic, q.partition): q for q in view.queue}
        for member in view.members:
            info.members.append(
                pb.GroupMemberInfo(
                    id=member.id,
                    instance_id=member.instance_id or "",
                    assignment=[
                        pb.TopicPartition(topic=t, partition=p)
                        for t, p in sorted(member.assignment)
                    ],
                    epoch=member.epoch,
                )
            )
        lags = []
        for partition in view.partitions:
            high_watermark, log_start = marks.get((partition.topic, partition.partition), (0, 0))
            queue = queues.get((partition.topic, partition.partition))
            # a queue's lag: records not settled yet, from its acked floor
            done = partition.committed if queue is None else max(queue.acked_floor, log_start)
            lag = group_lag(high_watermark, log_start, done)
            lags.append((partition.topic, partition.partition, lag))
            entry = pb.GroupPartitionInfo(
                topic=partition.topic,
                partition=partition.partition,
                high_watermark=high_watermark,
                lag=lag,
                owner=partition.owner or "",
            )
            if partition.committed is not None:
                entry.committed = partition.committed
            if queue is not None:
                entry.queue.CopyFrom(
                    pb.QueuePartitionInfo(
                        acked_floor=queue.acked_floor, in_flight=queue.in_flight,
                        waiting=queue.waiting, acked=queue.acked,
                        dead_lettered=queue.dead_lettered,
                        dead_letters_pending=queue.dead_letters_pending,
                        next_offset=queue.next_offset,
                    )
                )  # fmt: skip
            info.partitions.append(entry)
        self.node.groups.note_group(view.name, len(view.members), lags, view.queue)
        return info

    async def ResetGroupOffsets(
        self, request: pb.ResetGroupOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResetGroupOffsetsResponse:
        await self._allow(context, Operation.ADMIN, request.topic)
        group = await _group_name(request.group, context)
        offsets: dict[int, int] = {}
        for item in request.offsets:
            if item.topic and item.topic != request.topic:
                await abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"offset for topic {item.topic!r} in a reset of topic {request.topic!r}: "
                    "every offset must name the reset's topic (or none)",
                )
            offsets[item.partition] = item.offset
        topic = request.topic

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.reset_offsets(group, topic, offsets, topics)

        await self._on_coordinator(context, group, run, named=frozenset({topic}), wait=True)
        return pb.ResetGroupOffsetsResponse()

    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupResponse:
        await self._allow(context, Operation.ADMIN)
        group = await _group_name(request.group, context)

        def run(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            return coordinator.delete_group(group)

        await self._on_coordinator(context, group, run)
        return pb.DeleteGroupResponse()

    # -- routing and outcomes ---------------------------------------------------------------------
    async def _topics_loaded(self, context: grpc.aio.ServicerContext) -> None:
        if not self.node.topics_loaded:  # every topic would look unknown
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"node {self.node.config.node_id} is starting: topic metadata is not loaded yet",
                reason=COORDINATOR_LOADING,
            )

    async def _groups_partitions(self, context: grpc.aio.ServicerContext) -> int:
        await self._topics_loaded(context)
        try:
            return await self.node.groups.ensure_topic()
        except CoordinatorLoading as error:
            await abort(
                context, grpc.StatusCode.UNAVAILABLE, str(error), reason=COORDINATOR_LOADING
            )

    async def _on_coordinator(
        self,
        context: grpc.aio.ServicerContext,
        group: str,
        op: Op,
        partition: int | None = None,
        *,
        named: frozenset[str] = frozenset(),
        wait: bool = False,
        queue: bool = False,
    ) -> Any:
        """Runs `op` on the coordinator of `group` (or of `__groups` partition `partition`).
        `named`: topics the request names, looked for first if this node, the coordinator,
        does not know them (`_look_for_topics`; `wait`: for a while). `queue`: a call that
        writes queue entries (refused while a replica cannot read them)."""
        count = await self._groups_partitions(context)
        if partition is None:
            partition = group_partition(group, count)
        if named - set(self.node.topics) and self.node.groups.serves(partition):
            await self._look_for_topics(named, wait)
        try:
            return await self.node.groups.call(partition, group, op, queue=queue)
        except NotCoordinator as error:
            hint = await self._coordinator_hint(partition, error.leader_id)
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                str(error),
                hint,
                reason=NOT_COORDINATOR,
            )
        except CoordinatorLoading as error:
            await abort(
                context, grpc.StatusCode.UNAVAILABLE, str(error), reason=COORDINATOR_LOADING
            )
        except CoordinatorUnavailable as error:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(error))
        except GroupError as error:
            await _refuse(context, error)
        except NodeFailStopped:
            raise
        except Exception as error:  # a bug: logged with its traceback, answered as INTERNAL
            log.exception("a group call failed on a bug")
            await abort(
                context,
                grpc.StatusCode.INTERNAL,
                f"internal error ({type(error).__name__}: {error}); see the node's log",
            )

    async def _coordinator_hint(self, partition: int, leader_id: str | None) -> str:
        """`id=host:port` of the coordinator: this node's replica's leader, or else the leader
        the other members report ("" if none knows)."""
        if leader_id:
            return self.node.leader_hint(leader_id)
        metadata = await self.node.metadata([GROUPS_TOPIC])
        for topic in metadata.topics:
            for info in topic.partitions:
                if info.index == partition and info.leader:
                    return self.node.leader_hint(info.leader)
        return ""

    async def _look_for_topics(self, names: frozenset[str], wait: bool) -> None:
        """Refreshes the topic table for topics it lacks (once, or with `wait` until they are
        there or UNKNOWN_TOPIC_WAIT_S passed): one created a moment ago through another node
        reaches this node's table within a poll (on a controller, once its control plane has
        applied it). A topic still unknown is the core's `UnknownTopic` (NOT_FOUND naming it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (UNKNOWN_TOPIC_WAIT_S if wait else 0.0)
        while True:
            await self.node.refresh_topics()
            if not names - set(self.node.topics) or loop.time() >= deadline:
                return
            await asyncio.sleep(UNKNOWN_TOPIC_POLL_S)


async def _group_name(name: str, context: grpc.aio.ServicerContext) -> str:
    if not GROUP_NAME.match(name):
        shown = name if len(name) <= 40 else name[:40] + f"... ({len(name)} characters)"
        await abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"group name {shown!r} is invalid: use 1 to 200 characters from [A-Za-z0-9._-]",
        )
    return name


# The status and reason of each refusal of the core (the most specific first).
_REFUSALS: tuple[tuple[type[GroupError], grpc.StatusCode, str], ...] = (
    (FencedMember, grpc.StatusCode.FAILED_PRECONDITION, FENCED_MEMBER),
    (GroupNotFound, grpc.StatusCode.NOT_FOUND, GROUP_NOT_FOUND),
    (GroupNotEmpty, grpc.StatusCode.FAILED_PRECONDITION, GROUP_NOT_EMPTY),
    (UnknownTopic, grpc.StatusCode.NOT_FOUND, ""),
)


async def _refuse(context: grpc.aio.ServicerContext, error: GroupError) -> NoReturn:
    for kind, code, reason in _REFUSALS:
        if isinstance(error, kind):
            await abort(context, code, str(error), reason=reason)
    # InvalidGroupRequest, and any other refusal: a bad field, named in the message
    await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
