"""The consumer-group core's vocabulary: requests, replies, views and errors (frozen data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from consumers.queue_types import QueueOptions, QueuePartitionView

__all__ = [
    "JOIN",
    "LEAVE",
    "LEAVE_STATIC",
    "CommitRequest",
    "FencedMember",
    "GroupError",
    "GroupNotEmpty",
    "GroupNotFound",
    "GroupView",
    "HeartbeatReply",
    "HeartbeatRequest",
    "InvalidGroupRequest",
    "MemberView",
    "Outcome",
    "PartitionView",
    "TopicMeta",
    "TopicPartition",
    "UnknownTopic",
]

TopicPartition = tuple[str, int]
T = TypeVar("T")

# member_epoch values with a meaning of their own (GroupHeartbeatRequest in proto/flotilla.proto)
JOIN = 0
LEAVE = -1
LEAVE_STATIC = -2


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """A decision: the reply, and the entries (already applied to the coordinator's state) the
    node must commit before the reply leaves."""

    reply: T
    entries: list[bytes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """What the coordinator needs of a topic: its incarnation (offsets are keyed by it, so a
    deleted and recreated topic starts with none) and its partition count."""

    uid: str
    partitions: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group: str
    member_id: str  # "" to join
    member_epoch: int  # JOIN, LEAVE, LEAVE_STATIC, or the member's epoch
    session_timeout_ms: int
    instance_id: str | None = None  # static membership
    topics: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    owned: frozenset[TopicPartition] = frozenset()
    kind: str = "stream"
    # kind "queue": the group's options, replicated on join when they differ (the last join's
    # win); None on a stream group's heartbeat and on a queue member's later heartbeats
    queue: QueueOptions | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group: str
    member_id: str  # "" with member_epoch LEAVE: an admin commit (group must have no members)
    member_epoch: int
    offsets: tuple[tuple[str, int, int], ...]  # (topic, partition, next offset to read)


@dataclass(frozen=True, slots=True)
class MemberView:
    id: str
    instance_id: str | None
    epoch: int
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    committed: int | None
    owner: str | None


@dataclass(frozen=True, slots=True)
class GroupView:
    name: str
    kind: str
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionView, ...]  # every partition of every subscribed or committed topic
    # a queue group's options and per-partition state (empty for a stream group)
    queue_options: QueueOptions | None = None
    queue: tuple[QueuePartitionView, ...] = ()


class GroupError(Exception):
    """A request the coordinator refuses; nothing changed."""


class FencedMember(GroupError):
    """The member's session ended, it left or was replaced, or it named a partition it does not
    own. It must rejoin."""


class GroupNotFound(GroupError):
    pass


class GroupNotEmpty(GroupError):
    pass


class InvalidGroupRequest(GroupError):
    """A bad field (the message names it and what is valid)."""


class UnknownTopic(GroupError):
    """A commit or reset names a topic that does not exist (the node answers NOT_FOUND)."""
