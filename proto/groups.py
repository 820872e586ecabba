"""Where a consumer group lives: the internal topic `GROUPS_TOPIC` holds every group's state, one
group per partition `group_partition(name, partitions)`, whose Raft leader is the group's
coordinator. Shared by the node (which coordinates) and the SDK (which finds the coordinator from
the topic's metadata), so both hash a name the same way."""

from __future__ import annotations

import xxhash

__all__ = ["GROUPS_TOPIC", "INTERNAL_PREFIX", "group_partition", "is_internal"]

GROUPS_TOPIC = "__groups"
# Topic names that start with this are the cluster's own: clients may read them, never create,
# alter, delete or produce to them.
INTERNAL_PREFIX = "__"


def group_partition(name: str, partitions: int) -> int:
    """The partition of `GROUPS_TOPIC` that holds group `name` (stable across versions: changing
    it would move every group's state)."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return xxhash.xxh64_intdigest(name.encode()) % partitions


def is_internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_PREFIX)
