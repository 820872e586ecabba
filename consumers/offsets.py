"""Committed offsets: checking what a commit names, fencing a member's commit, and what changes.

Offsets are keyed by (topic uid, partition): a deleted and recreated topic (a new uid) starts with
none, and never expire. A commit is all or nothing: every check runs before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from consumers import validate
from consumers.entries import MemberRecord
from consumers.table import GroupState
from consumers.types import (
    FencedMember,
    GroupNotEmpty,
    InvalidGroupRequest,
    TopicMeta,
    TopicPartition,
)

__all__ = ["Offset", "changed", "check_owned", "checked", "committed", "fenced", "require_empty"]

Offset = tuple[str, str, int, int]  # (topic, topic uid, partition, next offset to read)


def checked(
    offsets: Iterable[tuple[str, int, int]], topics: Mapping[str, TopicMeta]
) -> list[Offset]:
    """(topic, partition, offset) triples checked against the topics (InvalidGroupRequest,
    UnknownTopic), each with its topic's uid."""
    found: dict[TopicPartition, Offset] = {}
    for topic, partition, offset in offsets:
        meta = validate.check_topic(topic, topics)
        validate.check_partition(topic, partition, meta)
        validate.check_offset(topic, partition, offset)
        if (topic, partition) in found:
            raise InvalidGroupRequest(
                f"offsets: {topic}/{partition} is named twice; name each partition once"
            )
        found[(topic, partition)] = (topic, meta.uid, partition, offset)
    return list(found.values())


def check_owned(member: MemberRecord, epoch: int, offsets: Iterable[Offset]) -> None:
    """FencedMember unless the member, at `epoch`, owns every partition named: a bogus epoch
    (newer than the member's) or a partition not in its assignment, or granted to it at a newer
    epoch than the commit's (the commit was sent before the grant, so by an older owner's rules).
    An older epoch is fine for partitions it already had: a commit racing a grant."""
    if epoch > member.epoch:
        raise FencedMember(
            f"member_epoch {epoch} of member {member.id!r} is newer than its epoch "
            f"{member.epoch}: rejoin"
        )
    granted = {(t, p): e for t, p, e in member.assignment}
    for topic, _, partition, _ in offsets:
        at = granted.get((topic, partition))
        if at is None or at > epoch:
            raise FencedMember(
                f"member {member.id!r} (epoch {epoch}) does not own {topic}/{partition}: "
                "nothing committed; rejoin"
            )


def changed(state: GroupState | None, offsets: Iterable[Offset]) -> list[Offset]:
    """The offsets that differ from what is committed, sorted (none: nothing to replicate)."""
    found = []
    for topic, uid, partition, offset in offsets:
        current = None
        if state is not None and uid in state.offsets:
            current = state.offsets[uid][1].get(partition)
        if current != offset:
            found.append((topic, uid, partition, offset))
    return sorted(found)


def committed(
    state: GroupState | None, topics: Mapping[str, TopicMeta], only: frozenset[str]
) -> dict[TopicPartition, int]:
    found: dict[TopicPartition, int] = {}
    if state is None:
        return found
    for uid, (topic, by_partition) in state.offsets.items():
        meta = topics.get(topic)
        if meta is None or meta.uid != uid or (only and topic not in only):
            continue
        for partition, offset in by_partition.items():
            found[(topic, partition)] = offset
    return dict(sorted(found.items()))


def fenced(group: str, member_id: str) -> FencedMember:
    return FencedMember(
        f"member {member_id!r} is not in group {group!r} (its session ended, it left or was "
        "replaced): rejoin"
    )


def require_empty(group: GroupState | None, doing: str) -> None:
    if group is not None and group.members:
        raise GroupNotEmpty(
            f"group {group.name!r} has {len(group.members)} member(s) "
            f"({', '.join(sorted(group.members)[:5])}): stop them before you {doing}"
        )
