"""The data the SDK returns: records, where a record was written, topics, partitions, members,
consumer groups, ACLs, tokens and who the caller is.

All are immutable. `flotilla` exports each of them; this module is their one home (the routing
and plans that build them are private: `flotilla._router`, `flotilla._plans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from proto.records import Record as WireRecord

__all__ = [
    "AclBinding",
    "Delivery",
    "GroupInfo",
    "GroupMember",
    "GroupPartition",
    "Headers",
    "Member",
    "PartitionInfo",
    "QueueOptions",
    "QueuePartitionInfo",
    "Record",
    "RecordMetadata",
    "Token",
    "TokenInfo",
    "TopicInfo",
    "TopicPartition",
    "WhoAmI",
]

TopicPartition = tuple[str, int]
"""A partition of a topic, as consumer groups name it: (topic, partition)."""

Headers = Sequence[tuple[str, bytes]]
"""A record's headers as the SDK takes them: (name, value) pairs, in order."""


# The SDK's record is the wire codec's (`proto.records.Record`, which the node side uses) with the
# place it was read from added: the SDK decodes a fetched batch straight into it, once per record.
@dataclass(frozen=True, slots=True)
class Record(WireRecord):
    """One record as read: its `topic` and `partition`, `offset` in that partition, `key` (None
    if it has none), `value`, `headers` ((name, value) pairs, in the order written) and
    `timestamp_ms` (the producer's clock when it was sent, milliseconds since the Unix epoch).
    Frozen."""

    topic: str = ""
    partition: int = -1


OffsetT = TypeVar("OffsetT", int, None)


class RecordMetadata(NamedTuple, Generic[OffsetT]):
    """Where a record was written: its `topic`, `partition` and `offset`. A delayed record
    (`delay_ms` / `deliver_at_ms`) is accepted, durably, but has no offset yet (`offset` None:
    it gets one when due) and `deliver_at_ms` says when it is due (epoch ms; None for an
    ordinary record). Generic in the offset's type for type checkers: an ordinary `produce`
    returns `RecordMetadata[int]`; where a call may be delayed it is `RecordMetadata[Any]`
    (check `deliver_at_ms`). A named tuple (as kafka-python's): immutable, and made in a
    fraction of a frozen dataclass's time — the producer makes one per record."""

    topic: str
    partition: int
    offset: OffsetT
    deliver_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a topic as a node reported it: `index`, `leader` (member id; "" while
    none is known), `replicas` (the voters, preferred leader first), `high_watermark` (the offset
    after the last committed record), `log_start` (the first offset retained) and
    `pending_timers` (delayed records accepted and not yet due). Frozen."""

    index: int
    leader: str
    replicas: tuple[str, ...]
    high_watermark: int
    log_start: int
    pending_timers: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: `name`, its `partitions` (PartitionInfo, by index), `replication_factor`,
    `retention_bytes` and `retention_ms` (0: unlimited), `uid` (this incarnation: a topic deleted
    and created again gets another), `note` (create_topic's answer only: e.g. a default
    replication factor the cluster lowered) and `max_delay_ms` (the longest delay a delayed
    produce may ask; 0 from a node that does not report it). Frozen."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    replication_factor: int = 0
    retention_bytes: int = 0  # 0: unlimited
    retention_ms: int = 0  # 0: unlimited
    uid: str = ""  # this incarnation: a topic deleted and created again gets another
    note: str = ""  # create_topic's answer only: e.g. a default replication factor lowered
    max_delay_ms: int = 0  # the longest delay a delayed produce may ask (default 40 days)


@dataclass(frozen=True, slots=True)
class Member:
    """A cluster member: `id`, `address` (host:port clients dial), `state` ("ALIVE", "SUSPECT",
    "DEAD" or "LEFT"), placement `weight` and `rack` ("" when not set). Frozen."""

    id: str
    address: str
    state: str
    weight: float
    rack: str


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member of a consumer group: its `id` (the coordinator names it), `instance_id` (a static
    member's; None for a dynamic one), `assignment` (the (topic, partition)s it owns or is being
    given) and `epoch` (grows each time its assignment changes). Frozen."""

    id: str
    instance_id: str | None
    assignment: frozenset[TopicPartition]
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class QueuePartitionInfo:
    """A queue group's state of one partition: `acked_floor` (every record below it is acked,
    dead-lettered, or was deleted by retention before it was handed out), `next_offset` (the
    lowest offset never handed out), `in_flight` (leased now), `waiting` (released or expired,
    to be handed out again), `acked` and `dead_lettered` (records, since the group began) and
    `dead_letters_pending` (decided, copy not confirmed yet). Frozen."""

    acked_floor: int
    next_offset: int
    in_flight: int
    waiting: int
    acked: int
    dead_lettered: int
    dead_letters_pending: int


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """A queue group's options as its coordinator holds them (the last join's):
    `max_deliveries`, `dead_letter_topic` (None: "<topic>.<group>.dlq"), `ordering` ("none" or
    "key"), `backoff_ms` (redelivery delays after the 1st, 2nd, ... expired lease; () : the
    default 1 s, 5 s, 30 s, 2 min) and `max_in_flight` (per partition; 0: the default, 2000).
    Frozen."""

    max_deliveries: int
    dead_letter_topic: str | None
    ordering: str
    backoff_ms: tuple[int, ...]
    max_in_flight: int


@dataclass(frozen=True, slots=True)
class GroupPartition:
    """One partition a consumer group reads: `committed` (the next offset the group reads; None
    where nothing is committed), the partition's `high_watermark`, `lag` (the records committed
    to the partition that the group has not: high_watermark - committed, or high_watermark -
    log_start where nothing is committed) and `owner` (the member id that owns it; None if
    none). Frozen."""

    topic: str
    partition: int
    committed: int | None
    high_watermark: int
    lag: int
    owner: str | None
    queue: QueuePartitionInfo | None = None  # a queue group's state of the partition


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group as its coordinator sees it now: `name`, `kind` ("stream": members share
    partitions; "queue": members share records, with leases), `coordinator` (the node id that
    coordinates it), `members` (GroupMember), `partitions` (GroupPartition: every partition of
    the topics it reads or has committed offsets for; a queue group's carry `.queue`) and
    `queue` (a queue group's options; None for a stream group). Frozen."""

    name: str
    kind: str
    coordinator: str
    members: tuple[GroupMember, ...]
    partitions: tuple[GroupPartition, ...]
    queue: QueueOptions | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A record a queue handed to this receiver (`Queue.receive`): the `record` (with its
    topic and partition), `delivery_count` (1 on its first hand-out, one more on each, never
    on a release) and `deadline_ms` (epoch ms: settle it before then, or it goes to another
    receiver). `topic`, `partition` and `offset` are the record's. Frozen: an `extend` returns
    the deliveries with their new deadlines (the old ones stay valid to settle)."""

    record: Record
    delivery_count: int
    deadline_ms: int

    @property
    def topic(self) -> str:
        """The record's topic."""
        return self.record.topic

    @property
    def partition(self) -> int:
        """The record's partition."""
        return self.record.partition

    @property
    def offset(self) -> int:
        """The record's offset in its partition."""
        return self.record.offset


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access-control entry: `permission` ("allow" or "deny") of `operation` ("produce",
    "consume", "admin" or "all") on `resource` (a topic name, or a prefix ending in "*":
    "orders.*"; "*" is every topic) for `principal` (a client's name, "*" every authenticated
    one). Deny wins over allow. Frozen."""

    principal: str
    operation: str
    resource: str
    permission: str = "allow"


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token just made (`Client.create_token`): `token` is the secret (shown only
    here: the cluster keeps its SHA-256 hash), `token_id` names it in lists and revocations.
    Its repr leaves the secret out. Frozen."""

    principal: str
    token: str = field(repr=False)
    token_id: str


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as the cluster lists it: its `principal`, `token_id` and when it was made
    (`created_ms`, epoch ms); never the token itself. Frozen."""

    principal: str
    token_id: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class WhoAmI:
    """The caller as the node asked sees it: `principal` ("" when not authenticated),
    `authenticated`, `superuser`, `via` ("token", "certificate", "peer", or ""), and
    `authorization` (whether the node enforces ACLs). Frozen."""

    principal: str
    authenticated: bool
    superuser: bool
    via: str
    authorization: bool
