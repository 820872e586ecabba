"""The queue core's vocabulary (groups of kind "queue"): options, requests, leases and views.

A queue group's members share every partition of a topic record by record. The coordinator
(`consumers.Coordinator`, the leader of the group's `__groups` partition) leases records to
members and replicates every lease, ack, release and dead letter as entries of that partition:
one log, one writer. Time is wall-clock epoch milliseconds passed in by the node (`now_ms`), so
the core stays pure and a replacement coordinator honours the deadlines its predecessor gave.

A lease is (member id, topic, partition, offset, delivery_count): a settlement names all of them
and applies only while the record is still leased to that member with that count, before its
deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACK",
    "DEFAULT_BACKOFF_MS",
    "DEFAULT_INVISIBLE_MS",
    "DEFAULT_MAX_DELIVERIES",
    "DEFAULT_MAX_IN_FLIGHT",
    "EXTEND",
    "KEY",
    "NONE",
    "QUEUE",
    "REASON_MAX_DELIVERIES",
    "REASON_REJECTED",
    "REJECT",
    "RELEASE",
    "DeadLetterJob",
    "Extent",
    "Lease",
    "QueueOptions",
    "QueuePartitionView",
    "ReceiveRequest",
    "SettleReply",
    "SettleRequest",
    "Settlement",
]

QUEUE = "queue"  # GroupState.kind of a queue group

# ordering
NONE = "none"
KEY = "key"

# settlement actions (proto SettleAction)
ACK = "ack"
RELEASE = "release"
REJECT = "reject"
EXTEND = "extend"

# the dead-letter reason header (`flotilla-dlq-reason`)
REASON_MAX_DELIVERIES = "max-deliveries"
REASON_REJECTED = "rejected"

DEFAULT_MAX_DELIVERIES = 5
DEFAULT_INVISIBLE_MS = 30_000
DEFAULT_MAX_IN_FLIGHT = 2_000
DEFAULT_BACKOFF_MS = (1_000, 5_000, 30_000, 120_000)


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """A queue group's options, replicated (the last join's win). `dead_letter_topic` None:
    "<topic>.<group>.dlq" of each source topic."""

    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    dead_letter_topic: str | None = None
    ordering: str = NONE
    backoff_ms: tuple[int, ...] = DEFAULT_BACKOFF_MS
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT

    def dead_letter_topic_of(self, group: str, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.{group}.dlq"


@dataclass(frozen=True, slots=True)
class Extent:
    """What the node knows of a source partition: records in [log_start, high_watermark) are
    committed and readable. The node must never report a high watermark above the committed one
    (a lagging one is fine: fewer records are handed out)."""

    log_start: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    group: str
    member_id: str
    member_epoch: int
    topic: str
    max_records: int  # 1..10000
    invisible_ms: int  # 0: DEFAULT_INVISIBLE_MS; 1000..43_200_000


@dataclass(frozen=True, slots=True)
class Lease:
    topic: str
    partition: int
    offset: int
    delivery_count: int  # 1 on the first hand-out
    deadline_ms: int  # epoch ms


@dataclass(frozen=True, slots=True)
class Settlement:
    topic: str
    partition: int
    offset: int
    delivery_count: int
    action: str  # ACK | RELEASE | REJECT | EXTEND
    delay_ms: int = 0  # RELEASE: 0..86_400_000
    invisible_ms: int = 0  # EXTEND: 1000..43_200_000


@dataclass(frozen=True, slots=True)
class SettleRequest:
    group: str
    member_id: str
    member_epoch: int
    settlements: tuple[Settlement, ...]  # 1..10000


@dataclass(frozen=True, slots=True)
class SettleReply:
    applied: tuple[Lease, ...]  # an extend's lease carries its new deadline
    lost: tuple[Lease, ...]  # expired, moved or settled already: nothing changed for them


@dataclass(frozen=True, slots=True)
class DeadLetterJob:
    """A record the coordinator decided to dead-letter whose copy is not confirmed yet. The node
    copies the source record (key, value, headers + the flotilla-dlq-* headers) to
    `dead_letter_topic` partition `partition % <its partition count>` as one batch of one record
    from the idempotent producer `producer_id` (epoch 0) at sequence `sequence`, acks=all, then
    reports it with `Coordinator.queue_dead_lettered`. A copy repeated after a failover is
    answered as a duplicate by the dead-letter partition: the record lands there once."""

    group: str
    topic: str
    topic_uid: str
    partition: int
    offset: int
    delivery_count: int
    reason: str  # REASON_MAX_DELIVERIES | REASON_REJECTED
    dead_letter_topic: str
    producer_id: int  # deterministic: (group, topic uid, partition) -> 63-bit id, never 0
    # this (group, topic uid, partition)'s dead letters to `dead_letter_topic` so far, from 0:
    # contiguous, as the dead-letter partition's idempotence requires. The node copies every
    # one, in order; one whose source is gone still gets a record at its sequence (see
    # `Coordinator.queue_dead_letter_gone`)
    sequence: int


@dataclass(frozen=True, slots=True)
class QueuePartitionView:
    topic: str
    partition: int
    acked_floor: int
    next_offset: int
    in_flight: int
    waiting: int
    acked: int
    dead_lettered: int
    dead_letters_pending: int
    deleted: int = 0  # settled by retention before it was handed out (or while it waited)
