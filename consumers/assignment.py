"""Target assignment by rendezvous (highest-random-weight) hashing.

Each partition of a subscribed topic goes to the subscriber with the highest
`weight(member_key, topic, partition)` (xxh64; ties, which need a 64-bit collision, go to the
larger key). A member's key is its instance id when it is static (so a restarted static member
gets the same partitions), else its member id. Adding or removing one of N subscribers moves
only the partitions whose highest weight it has or had: about 1/N of them, and nothing moves
between the others. Deterministic: the same members and topics give the same target anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import xxhash

from consumers.types import TopicMeta, TopicPartition

__all__ = ["Subscriber", "target_assignment", "weight"]


@dataclass(frozen=True, slots=True)
class Subscriber:
    member_id: str
    key: str  # instance id of a static member, else its member id
    topics: tuple[str, ...]


def weight(key: str, topic: str, partition: int) -> int:
    return xxhash.xxh64_intdigest(f"{key}\x00{topic}\x00{partition}".encode())


def target_assignment(
    subscribers: Iterable[Subscriber], topics: Mapping[str, TopicMeta]
) -> dict[str, frozenset[TopicPartition]]:
    """member id -> the partitions it should own. Topics missing from `topics` (not created yet,
    or deleted) give nothing."""
    members = sorted(subscribers, key=lambda s: s.key)
    target: dict[str, set[TopicPartition]] = {s.member_id: set() for s in members}
    by_topic: dict[str, list[Subscriber]] = {}
    for subscriber in members:
        for topic in subscriber.topics:
            by_topic.setdefault(topic, []).append(subscriber)
    for topic, candidates in sorted(by_topic.items()):
        meta = topics.get(topic)
        if meta is None:
            continue
        # the bytes of `weight`'s input, built once per member and per partition
        keys = [(s.key.encode() + b"\x00", s.key, s.member_id) for s in candidates]
        suffix = topic.encode() + b"\x00"
        digest = xxhash.xxh64_intdigest
        for partition in range(meta.partitions):
            tail = suffix + str(partition).encode()
            best = max(keys, key=lambda k: (digest(k[0] + tail), k[1]))
            target[best[2]].add((topic, partition))
    return {member_id: frozenset(tps) for member_id, tps in target.items()}
