"""Consumer groups' calls as plans (no I/O; a driver runs them, as `flotilla._core`'s).

Every group call goes to the group's coordinator: the leader of partition
`proto.groups.group_partition(group, n)` of the internal topic `__groups` (n partitions), found
from that topic's metadata (`GroupCalls.call`). A node that does not coordinate the group answers
NOT_COORDINATOR with the one that does when it knows (followed at once, a few hops at most);
without a hint, or while the coordinator loads the groups' state (COORDINATOR_LOADING), or while
no node is reachable, the call backs off (jittered, doubling) and refreshes `__groups`' metadata,
until its timeout. Before the first group call of a cluster `__groups` does not exist: the call
goes to any node, which creates it, and retries likewise.
"""

from __future__ import annotations

import random
import time
from typing import Any

from google.protobuf.message import Message

from flotilla._checks import check_group, check_reset_to
from flotilla._core import ClientCore, Failed, Plan, Rpc, Sleep
from flotilla._plans import ATTEMPT_S, MAX_HINT_HOPS
from flotilla.errors import (
    FlotillaError,
    InvalidArgument,
    NotLeader,
    Timeout,
    TopicNotFound,
    Unavailable,
)
from flotilla.types import (
    GroupInfo,
    GroupMember,
    GroupPartition,
    QueueOptions,
    QueuePartitionInfo,
    TopicPartition,
)
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, group_partition

__all__ = ["GroupCalls", "group_info", "resolve_reset"]

MAX_GROUP_BACKOFF_S = 0.5  # a coordinator loading or moving is back within about this


def _retriable(error: FlotillaError) -> bool:
    """A failure the next attempt (after a refresh of `__groups`' metadata) may cure: no
    coordinator reachable or loading, another node coordinating, or `__groups` not created yet."""
    if isinstance(error, Unavailable | Timeout | NotLeader):
        return True
    return isinstance(error, TopicNotFound) and GROUPS_TOPIC in str(error)


def group_info(message: pb.GroupInfo) -> GroupInfo:
    """The SDK type of a group as its coordinator described it."""
    return GroupInfo(
        message.name,
        message.kind or "stream",
        message.coordinator,
        tuple(
            GroupMember(
                m.id,
                m.instance_id or None,
                frozenset((tp.topic, tp.partition) for tp in m.assignment),
                m.epoch,
            )
            for m in message.members
        ),
        tuple(
            GroupPartition(
                p.topic,
                p.partition,
                p.committed if p.HasField("committed") else None,
                p.high_watermark,
                p.lag,
                p.owner or None,
                _queue_partition(p.queue) if p.HasField("queue") else None,
            )
            for p in message.partitions
        ),
        _queue_options(message.queue) if message.HasField("queue") else None,
    )


def _queue_partition(q: pb.QueuePartitionInfo) -> QueuePartitionInfo:
    return QueuePartitionInfo(
        q.acked_floor,
        q.next_offset,
        q.in_flight,
        q.waiting,
        q.acked,
        q.dead_lettered,
        q.dead_letters_pending,
    )


def _queue_options(q: pb.QueueOptions) -> QueueOptions:
    return QueueOptions(
        q.max_deliveries,
        q.dead_letter_topic or None,
        q.ordering or "none",
        tuple(q.backoff_ms),
        q.max_in_flight,
    )


def resolve_reset(
    group: str, topic: str, to: str | int | dict[int, int], bounds: list[tuple[int, int]]
) -> dict[int, int]:
    """`reset_group_offsets`'s `to` as explicit offsets per partition, given each partition's
    (log_start, high_watermark); InvalidArgument naming an offset outside them or a partition
    the topic lacks."""
    if to == "earliest":
        return {p: low for p, (low, _) in enumerate(bounds)}
    if to == "latest":
        return {p: high for p, (_, high) in enumerate(bounds)}
    wanted = to if isinstance(to, dict) else {p: int(to) for p in range(len(bounds))}
    for partition, offset in wanted.items():
        if partition >= len(bounds):
            raise InvalidArgument(
                f"partition {partition} of topic {topic!r} does not exist: valid partitions are "
                f"0..{len(bounds) - 1}; group {group!r} was not changed"
            )
        low, high = bounds[partition]
        if not low <= offset <= high:
            raise InvalidArgument(
                f"offset {offset} is out of range for {topic}/{partition}: valid offsets are "
                f"{low}..{high} (the log start to the high watermark); group {group!r} was not "
                "changed"
            )
    return {p: int(o) for p, o in wanted.items()}


class GroupCalls:
    """The group calls of one client (over its core: router, metadata, timeout)."""

    def __init__(self, core: ClientCore) -> None:
        self.core = core
        self.router = core.router

    # -- routing ---------------------------------------------------------------------------------
    def groups_partitions(self) -> Plan[int | None]:
        """How many partitions `__groups` has (None while it does not exist yet)."""
        info = self.router.topic(GROUPS_TOPIC)
        if info is None or not info.partitions:
            try:
                yield from self.core.refresh([GROUPS_TOPIC])
            except (TopicNotFound, Unavailable, Timeout):
                return None
            info = self.router.topic(GROUPS_TOPIC)
        return len(info.partitions) if info is not None and info.partitions else None

    def call(
        self,
        group: str | None,
        method: str,
        request: Message,
        *,
        partition: int | None = None,
        timeout_s: float | None = None,
        attempt_s: float = ATTEMPT_S,
    ) -> Plan[Any]:
        """Runs `method` at the coordinator of `group` (or at the leader of `__groups` partition
        `partition`), following NOT_COORDINATOR hints and retrying as the module text says until
        `timeout_s` (default: the client's timeout); other errors raise at once. `attempt_s`:
        one attempt's deadline (a queue receive's is longer than its server-side wait)."""
        deadline = time.monotonic() + (self.core.timeout_s if timeout_s is None else timeout_s)
        backoff, hops = 0.02, 0
        last: FlotillaError | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise last or Timeout(f"{method} for group {group!r} timed out")
            count = yield from self.groups_partitions()
            index: int | None = None
            address: str | None = None
            if count is not None:
                index = partition if partition is not None else group_partition(group or "", count)
                address = self.router.leader_address(GROUPS_TOPIC, index)
                if address is None:
                    address = self.router.other_replica(GROUPS_TOPIC, index, set())
            if address is None:  # `__groups` not created yet: any node creates it
                address = self.router.candidates()[0]
            outcome = yield Rpc(address, method, request, min(remaining, attempt_s))
            if not isinstance(outcome, Failed):
                return outcome
            error = outcome.error
            if not _retriable(error):
                raise error from None
            last = error
            hinted = index is not None and isinstance(error, NotLeader) and error.leader
            if hinted and hops < MAX_HINT_HOPS:
                assert index is not None and isinstance(error, NotLeader)
                hops += 1
                self.router.note_leader(GROUPS_TOPIC, index, error.leader)
                continue
            hops = 0
            if index is not None:
                self.router.forget_leader(GROUPS_TOPIC, index)
            yield Sleep(min(backoff * random.uniform(0.5, 1.0), max(0.0, remaining)))
            backoff = min(backoff * 2, MAX_GROUP_BACKOFF_S)
            try:
                yield from self.core.refresh([GROUPS_TOPIC])
            except (TopicNotFound, Unavailable, Timeout):
                pass  # not created yet, or no node answered: the next round tries again

    # -- members' calls --------------------------------------------------------------------------
    def fetch_offsets(self, group: str, topics: list[str]) -> Plan[dict[TopicPartition, int]]:
        """The group's committed offsets of `topics` (every topic if empty), from its
        coordinator."""
        request = pb.FetchOffsetsRequest(group=group, topics=topics)
        response = yield from self.call(group, "FetchOffsets", request)
        return {(o.topic, o.partition): int(o.offset) for o in response.offsets}

    def commit(
        self,
        group: str,
        member_id: str,
        epoch: int,
        offsets: dict[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> Plan[None]:
        request = pb.CommitOffsetsRequest(
            group=group,
            member_id=member_id,
            member_epoch=epoch,
            offsets=[
                pb.PartitionOffset(topic=t, partition=p, offset=o)
                for (t, p), o in sorted(offsets.items())
            ],
        )
        yield from self.call(group, "CommitOffsets", request, timeout_s=timeout_s)

    # -- admin -----------------------------------------------------------------------------------
    def list_groups(self) -> Plan[list[str]]:
        """Every group's name: each `__groups` partition's leader asked for its own, merged."""
        count = yield from self.groups_partitions()
        names: set[str] = set()
        for index in range(count or 0):
            response = yield from self.call(
                None, "ListGroups", pb.ListGroupsRequest(partition=index), partition=index
            )
            names.update(response.names)
        return sorted(names)

    def describe_group(self, group: str) -> Plan[GroupInfo]:
        check_group(group)
        response = yield from self.call(
            group, "DescribeGroup", pb.DescribeGroupRequest(group=group)
        )
        return group_info(response)

    def committed(self, group: str, topic: str, partition: int) -> Plan[int | None]:
        offsets = yield from self.fetch_offsets(group, [topic])
        return offsets.get((topic, partition))

    def reset_group_offsets(
        self, group: str, topic: str, to: str | int | dict[int, int]
    ) -> Plan[dict[int, int]]:
        """Sets the group's offsets of `topic`; the offsets set, per partition."""
        check_group(group)
        wanted = check_reset_to(to)
        if not isinstance(topic, str) or not topic:
            raise InvalidArgument(f"topic {topic!r} is invalid: give the topic's name")
        info = yield from self.core.describe_topic(topic)
        bounds = [(p.log_start, p.high_watermark) for p in info.partitions]
        offsets = resolve_reset(group, topic, wanted, bounds)
        request = pb.ResetGroupOffsetsRequest(
            group=group,
            topic=topic,
            offsets=[
                pb.PartitionOffset(topic=topic, partition=p, offset=o)
                for p, o in sorted(offsets.items())
            ],
        )
        yield from self.call(group, "ResetGroupOffsets", request)
        return offsets

    def delete_group(self, group: str) -> Plan[None]:
        check_group(group)
        yield from self.call(group, "DeleteGroup", pb.DeleteGroupRequest(group=group))
