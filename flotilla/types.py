"""The data the SDK returns: records, where a record was written, topics, partitions, members,
consumer groups.

All are immutable. `flotilla` exports each of them; this module is their one home (the routing
and plans that build them are private: `flotilla._router`, `flotilla._plans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from proto.records import Record as WireRecord

__all__ = [
    "GroupInfo",
    "GroupMember",
    "GroupPartition",
    "Headers",
    "Member",
    "PartitionInfo",
    "Record",
    "RecordMetadata",
    "TopicInfo",
    "TopicPartition",
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


class RecordMetadata(NamedTuple):
    """Where a record was written: its `topic`, `partition` and `offset`. A named tuple (as
    kafka-python's): immutable, and made in a fraction of a frozen dataclass's time — the
    producer makes one per record."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a topic as a node reported it: `index`, `leader` (member id; "" while
    none is known), `replicas` (the voters, preferred leader first), `high_watermark` (the offset
    after the last committed record) and `log_start` (the first offset retained). Frozen."""

    index: int
    leader: str
    replicas: tuple[str, ...]
    high_watermark: int
    log_start: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: `name`, its `partitions` (PartitionInfo, by index), `replication_factor`,
    `retention_bytes` and `retention_ms` (0: unlimited), `uid` (this incarnation: a topic deleted
    and created again gets another) and `note` (create_topic's answer only: e.g. a default
    replication factor the cluster lowered). Frozen."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    replication_factor: int = 0
    retention_bytes: int = 0  # 0: unlimited
    retention_ms: int = 0  # 0: unlimited
    uid: str = ""  # this incarnation: a topic deleted and created again gets another
    note: str = ""  # create_topic's answer only: e.g. a default replication factor lowered


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


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group as its coordinator sees it now: `name`, `kind` ("stream": members share
    partitions; "queue": reserved), `coordinator` (the node id that coordinates it), `members`
    (GroupMember) and `partitions` (GroupPartition: every partition of the topics it reads or
    has committed offsets for). Frozen."""

    name: str
    kind: str
    coordinator: str
    members: tuple[GroupMember, ...]
    partitions: tuple[GroupPartition, ...]
