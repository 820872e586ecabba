"""The replicated group table: every group one `__groups` partition holds, folded from entries.

`GroupTable.apply` is the only way the table changes, both when a coordinator loads the log and
when it decides something (it applies its own entry before returning it). So a coordinator
rebuilt from the committed entries holds exactly the state its predecessor had acknowledged.

Invariants (checked by the tests and the simulator):
    owners[tp] == m  <=>  tp in members[m].partitions         (per group)
    every member id of a group is unique and never reused: ids come from `next_serial`, which
    only grows (it survives the deletion of a group)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.entries import (
    Entry,
    GroupDeleted,
    MemberRecord,
    MemberRemoved,
    MemberSet,
    OffsetsCommitted,
    QueueDeadLettered,
    QueueLeased,
    QueueOptionsSet,
    QueueSettled,
)
from consumers.queue_types import QUEUE
from consumers.queues import PartitionQueue, QueueGroup
from consumers.types import TopicPartition

__all__ = ["GroupState", "GroupTable"]

STREAM = "stream"


@dataclass(slots=True)
class GroupState:
    name: str
    kind: str = STREAM
    members: dict[str, MemberRecord] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # tp -> member id
    # topic uid -> (topic name, {partition: next offset to read}). Offsets of a deleted topic's
    # incarnation stay (they are never returned for a recreated topic, whose uid differs): a node
    # whose metadata lags must not be able to erase the current incarnation's offsets.
    offsets: dict[str, tuple[str, dict[int, int]]] = field(default_factory=dict)
    # changes on every change of members or subscriptions (caches key on it); drawn from the
    # table's counter, so a group deleted and created again never repeats a version
    version: int = 0
    # a queue group's options and per-partition queue state (kind "queue"; None otherwise). A
    # queue group outlives its members (its leases and counts stay) until it is deleted.
    queue: QueueGroup | None = None

    @property
    def empty(self) -> bool:
        return not self.members and not self.offsets and self.queue is None

    def by_instance(self, instance_id: str) -> MemberRecord | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None


class GroupTable:
    def __init__(self) -> None:
        self.groups: dict[str, GroupState] = {}
        self.next_serial = 1
        self._version = 0

    def group(self, name: str) -> GroupState | None:
        return self.groups.get(name)

    def apply(self, entry: Entry) -> None:
        match entry:
            case MemberSet(group=name, kind=kind, member=member):
                group = self.groups.setdefault(name, GroupState(name, kind))
                group.kind = kind
                old = group.members.get(member.id)
                if old is not None:
                    self._release(group, old)
                group.members[member.id] = member
                for tp in member.partitions:
                    group.owners[tp] = member.id
                if old is None or old.topics != member.topics:
                    group.version = self._next_version()
                self.next_serial = max(self.next_serial, member.serial + 1)
            case MemberRemoved(group=name, member_id=member_id):
                state = self.groups.get(name)
                if state is None or member_id not in state.members:
                    return
                self._release(state, state.members.pop(member_id))
                state.version = self._next_version()
                if state.empty:
                    del self.groups[name]
            case OffsetsCommitted(group=name, offsets=offsets):
                group = self.groups.setdefault(name, GroupState(name))
                for topic, uid, partition, offset in offsets:
                    group.offsets.setdefault(uid, (topic, {}))[1][partition] = offset
            case GroupDeleted(group=name):
                self.groups.pop(name, None)
            case QueueOptionsSet(group=name, options=options):
                self._queue(name).options = options
            case QueueLeased():
                self._partition(entry).apply_leased(entry)
            case QueueSettled():
                self._partition(entry).apply_settled(entry)
            case QueueDeadLettered():
                self._partition(entry).apply_dead_lettered(entry)

    def _queue(self, name: str) -> QueueGroup:
        group = self.groups.setdefault(name, GroupState(name, QUEUE))
        if group.queue is None:
            group.queue = QueueGroup()
        return group.queue

    def _partition(self, entry: QueueLeased | QueueSettled | QueueDeadLettered) -> PartitionQueue:
        queue = self._queue(entry.group)
        return queue.partition(entry.topic, entry.topic_uid, entry.partition)

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    @staticmethod
    def _release(group: GroupState, member: MemberRecord) -> None:
        for tp in member.partitions:
            if group.owners.get(tp) == member.id:
                del group.owners[tp]
