"""What the control plane holds of a topic (`TopicSpec`: its shape, retention, initial
assignment and incarnation) and the outcomes of its changes, apart from the store that replicates
them (`cluster.controller`). A spec travels as a plain dict (`to_wire`/`from_wire`): that is what
the replicated state and its journal keep, so the class may move without a migration.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster.placement import partition_id
from timers.types import DEFAULT_MAX_DELAY_MS, TIMER_TOPIC_PREFIX

__all__ = ["CreateOutcome", "TopicSpec", "UpdateOutcome", "placement_key", "timer_source"]


class CreateOutcome(enum.Enum):
    CREATED = "created"
    EXISTS = "exists"  # the same spec exists already: create is idempotent
    CONFLICT = "conflict"  # a topic of that name exists with another spec


class UpdateOutcome(enum.Enum):
    UPDATED = "updated"
    MISSING = "missing"  # no such topic
    FEWER = "fewer"  # partitions can only be added


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int = 0  # 0: unlimited
    retention_ms: int = 0  # 0: unlimited
    assignment: tuple[tuple[str, ...], ...] = ()  # initial voters per partition, best first
    uid: str = ""  # distinguishes a re-created topic from the deleted one of the same name
    # the longest delay a delayed produce may ask (`timers.types`); a spec written before
    # delayed delivery has none: the default
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS

    def same_shape(self, other: TopicSpec) -> bool:
        return (
            self.partitions,
            self.replication_factor,
            self.retention_bytes,
            self.retention_ms,
            self.max_delay_ms,
        ) == (
            other.partitions,
            other.replication_factor,
            other.retention_bytes,
            other.retention_ms,
            other.max_delay_ms,
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "retention_bytes": self.retention_bytes,
            "retention_ms": self.retention_ms,
            "assignment": [list(voters) for voters in self.assignment],
            "uid": self.uid,
            "max_delay_ms": self.max_delay_ms,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> TopicSpec:
        return cls(
            name=str(data["name"]),
            partitions=int(data["partitions"]),
            replication_factor=int(data["replication_factor"]),
            retention_bytes=int(data.get("retention_bytes", 0)),
            retention_ms=int(data.get("retention_ms", 0)),
            assignment=tuple(
                tuple(str(n) for n in voters) for voters in data.get("assignment", [])
            ),
            uid=str(data.get("uid", "")),
            max_delay_ms=int(data.get("max_delay_ms", DEFAULT_MAX_DELAY_MS)),
        )


def timer_source(topic: str, topics: Mapping[str, TopicSpec]) -> TopicSpec | None:
    """The source topic whose timer log `topic` is (`__timers.<uid>`, `timers.types`), if it
    exists; None for any other topic. A scan of the topics, for timer topics only (a node has
    one per delayed source at most)."""
    if not topic.startswith(TIMER_TOPIC_PREFIX):
        return None
    uid = topic[len(TIMER_TOPIC_PREFIX) :]
    return next((spec for spec in topics.values() if spec.uid == uid), None)


def placement_key(topic: str, index: int, topics: Mapping[str, TopicSpec]) -> str:
    """What rendezvous placement hashes for partition `index` of `topic`
    (`placement.place`): its own id, but a timer log's partition is placed as its source
    partition is — the same members in the same order, and (its assignment copied from the
    source's) the same preferred leader. So one node leads both: a due batch is proposed to the
    source partition on the node that fires it (`cluster.timer_fire`), no network hop, and a
    fault that cuts two nodes apart cannot cut the timers from their partition."""
    source = timer_source(topic, topics)
    return partition_id(source.name if source is not None else topic, index)
