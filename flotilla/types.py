"""The data the SDK returns: records, where a record was written, topics, partitions, members.

All are immutable. `flotilla` exports each of them; this module is their one home (the routing
and plans that build them are private: `flotilla._router`, `flotilla._plans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from proto.records import Record

__all__ = ["Headers", "Member", "PartitionInfo", "Record", "RecordMetadata", "TopicInfo"]

Headers = Sequence[tuple[str, bytes]]
"""A record's headers as the SDK takes them: (name, value) pairs, in order."""

# `Record` is the wire codec's own class (proto.records decodes straight into it, once per record,
# with no copy); its user-facing text is given here, where the SDK's other types are.
Record.__doc__ = """One record as read: `offset` in its partition, `key` (None if it has none),
`value`, `headers` ((name, value) pairs, in the order written) and `timestamp_ms` (the
producer's clock when it was sent, milliseconds since the Unix epoch). Frozen."""


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
