"""What one queue call decides for one partition, before it becomes an entry: `SettleBuilder`
(leases that end: one `QueueSettled`) and `ReceivePlan` (what a receive takes: one
`QueueLeased`). Pure: they read a `PartitionQueue` and never change it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from consumers.entries import QueueSettled
from consumers.queue_types import REASON_MAX_DELIVERIES, QueueOptions
from consumers.queues import Leased, PartitionQueue, key_hash

__all__ = ["ReceivePlan", "SettleBuilder"]


@dataclass(slots=True)
class SettleBuilder:
    """The leases of one partition that end in one call, as one `QueueSettled` entry."""

    group: str
    state: PartitionQueue
    options: QueueOptions
    acked: list[int] = field(default_factory=list)
    waiting: list[tuple[int, int, int]] = field(default_factory=list)
    extended: list[tuple[int, int]] = field(default_factory=list)
    dead: list[tuple[int, int, int, str, str]] = field(default_factory=list)
    sequences: dict[str, int] = field(default_factory=dict)  # dead-letter topic -> next
    ended: set[int] = field(default_factory=set)  # offsets whose lease ends in this entry
    settled_by: str = ""  # the member whose settle call this is ("": expiries, departures)

    def back(self, offset: int, lease: Leased, available_at_ms: int, count: int) -> None:
        """The lease ends unsettled: waiting again, or dead-lettered at max_deliveries."""
        self.ended.add(offset)
        if lease.delivery_count >= self.options.max_deliveries:
            self.dead_letter(offset, lease, REASON_MAX_DELIVERIES)
        else:
            self.waiting.append((offset, available_at_ms, count))

    def dead_letter(self, offset: int, lease: Leased, reason: str) -> None:
        if offset < self.state.trimmed_to:
            # retention deleted it: there is nothing to copy (settled as deleted on apply)
            self.waiting.append((offset, 0, lease.delivery_count))
            return
        topic = self.options.dead_letter_topic_of(self.group, self.state.topic)
        sequence = self.sequences.get(topic, self.state.sequences.get(topic, 0))
        self.dead.append((offset, sequence, lease.delivery_count, reason, topic))
        self.sequences[topic] = sequence + 1

    def entry(self) -> QueueSettled | None:
        if not (self.acked or self.waiting or self.extended or self.dead):
            return None
        s = self.state
        return QueueSettled(
            self.group,
            s.topic,
            s.topic_uid,
            s.partition,
            tuple(self.acked),
            tuple(self.waiting),
            tuple(self.extended),
            tuple(self.dead),
            self.settled_by,
        )


@dataclass(slots=True)
class ReceivePlan:
    """What one receive takes from one partition."""

    state: PartitionQueue
    log_start: int
    trimmed: bool
    cursor: int  # the next fresh offset to look at
    limit: int  # fresh offsets below it may be handed out
    keys: Mapping[int, bytes | None] | None  # ordering "key": the keys read, else None
    leases: list[tuple[int, int, int | None]] = field(default_factory=list)
    skipped: list[tuple[int, int | None]] = field(default_factory=list)
    new_keys: set[int] = field(default_factory=set)
    taken: set[int] = field(default_factory=set)

    def waiting(self, now_ms: int, limit: int) -> int:
        """Leases up to `limit` waiting records whose time came; how many it leased."""
        offsets = self.state.take_ready(now_ms, limit, self.taken)
        for offset in offsets:
            waiting = self.state.waiting[offset]
            self.leases.append((offset, waiting.delivery_count + 1, waiting.key_hash))
        return len(offsets)

    def fresh(self, limit: int) -> int:
        """Leases up to `limit` fresh records; how many it leased."""
        got = 0
        while got < limit and self.cursor < self.limit:
            offset = self.cursor
            key = None
            if self.keys is not None:
                if offset not in self.keys:
                    self.limit = offset  # its key was not read: stop here
                    break
                key = key_hash(self.keys[offset])
                if self.state.key_blocked(key) or key in self.new_keys:
                    self.skipped.append((offset, key))
                    self.cursor += 1
                    continue
                if key is not None:
                    self.new_keys.add(key)
            self.leases.append((offset, 1, key))
            self.cursor += 1
            got += 1
        return got
