"""What a receive hands out, and which keys a key-ordered receive needs: pure functions over a
queue group's state (`consumers.queues`). The coordinator checks the request first and applies
the entries returned (one `QueueLeased` per partition that changed)."""

from __future__ import annotations

from collections.abc import Mapping

from consumers.entries import QueueLeased
from consumers.queue_plans import ReceivePlan
from consumers.queue_types import KEY, Extent, Lease
from consumers.queues import PartitionQueue, QueueGroup
from consumers.types import TopicMeta, TopicPartition

__all__ = ["key_window", "receive"]


def receive(
    queue: QueueGroup,
    group: str,
    member_id: str,
    topic: str,
    meta: TopicMeta,
    start: int,
    max_records: int,
    now_ms: int,
    deadline_ms: int,
    extents: Mapping[TopicPartition, Extent],
    keys: Mapping[TopicPartition, Mapping[int, bytes | None]] | None,
) -> tuple[list[Lease], list[QueueLeased]]:
    """Up to `max_records` leases: first waiting records whose time came, then fresh ones,
    partitions taken round-robin in shares from `start`. Trims a partition whose extent's log
    start passed what it knew (the entry carries it, so a replay trims the same)."""
    plans: list[ReceivePlan] = []
    for i in range(meta.partitions):
        partition = (start + i) % meta.partitions
        # a partition's state comes to be with its first entry (a receive that hands out
        # nothing leaves none behind: the live state and a replay's stay equal)
        state = queue.partitions.get((meta.uid, partition))
        if state is None:
            state = PartitionQueue(topic, meta.uid, partition)
        extent = extents.get((topic, partition))
        log_start = state.trimmed_to
        trimmed = extent is not None and extent.log_start > state.trimmed_to
        if extent is not None and trimmed:
            log_start = extent.log_start
            state.trim(log_start)
        limit = state.next_offset
        if extent is not None:
            room = state.floor + queue.options.max_in_flight
            limit = max(limit, min(extent.high_watermark, room))
        plan_keys = None
        if queue.options.ordering == KEY:
            plan_keys = (keys or {}).get((topic, partition), {})
        plans.append(ReceivePlan(state, log_start, trimmed, state.next_offset, limit, plan_keys))
    remaining = max_records
    for fresh in (False, True):
        active = list(plans)
        while remaining and active:
            share = max(1, remaining // len(active))
            still = []
            for plan in active:
                want = min(share, remaining)
                if want == 0:
                    break
                got = plan.fresh(want) if fresh else plan.waiting(now_ms, want)
                remaining -= got
                if got == want:
                    still.append(plan)
            active = still
    leases: list[Lease] = []
    entries: list[QueueLeased] = []
    for plan in sorted(plans, key=lambda p: p.state.partition):
        if not (plan.leases or plan.skipped or plan.trimmed):
            continue
        state = plan.state
        plan.leases.sort()
        next_offset = max(plan.cursor, state.next_offset)
        entries.append(
            QueueLeased(
                group,
                topic,
                meta.uid,
                state.partition,
                plan.log_start,
                member_id,
                deadline_ms,
                next_offset,
                tuple(plan.leases),
                tuple(plan.skipped),
            )
        )
        leases.extend(
            Lease(topic, state.partition, offset, count, deadline_ms)
            for offset, count, _ in plan.leases
        )
    return leases, entries


def key_window(
    queue: QueueGroup,
    topic: str,
    partition: int,
    extent: Extent,
    limit: int,
    topic_uid: str | None,
) -> range:
    """The fresh offsets a key-ordered receive of the partition may look at (at most `limit`)."""
    if queue.options.ordering != KEY:
        return range(0)
    if topic_uid is None:
        state = queue.find(topic, partition)
    else:
        state = queue.partitions.get((topic_uid, partition))
    if state is None:
        start = floor = extent.log_start
    else:
        start = max(state.next_offset, extent.log_start)
        floor = start if state.floor == state.next_offset else state.floor
    end = min(extent.high_watermark, floor + queue.options.max_in_flight, start + limit)
    return range(start, max(start, end))
