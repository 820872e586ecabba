"""Topic retention, applied to the replicas this node hosts.

Every `retention_check_s` the partition manager (`cluster.node`) calls `apply_retention`: each
replica whose topic sets `retention_bytes` or `retention_ms` drops its whole sealed segments past
the limit, only entries already applied (committed), and within a MultiRaft round, while no Raft
node steps (`MultiRaft.maintain`). Every replica does so on its own, as Kafka's do; a follower
that falls behind the leader's log start is reset to it (Raft's `LogReset`). Reads below a
replica's log start are OUT_OF_RANGE.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from functools import partial
from typing import cast

from cluster.controller import TopicSpec
from cluster.failstop import storage_failure
from cluster.logs import EventBudget
from cluster.multiraft import MultiRaft
from cluster.replica import Replica

__all__ = ["RETENTION_CHUNK", "apply_retention", "apply_timer_retention"]

log = logging.getLogger("flotilla.retention")

# Replicas one round checks: a round's writes wait for it, so thousands of partitions are
# checked over several rounds.
RETENTION_CHUNK = 256
# retention cuts logged one line each per pass; the rest are counted in one summary line
RETENTION_LOG_BUDGET = 20

Work = list[tuple[Replica, int | None, int | None]]


async def apply_retention(
    multiraft: MultiRaft, topics: Mapping[str, TopicSpec], now_ms: int | None = None
) -> int:
    """Applies each topic's retention to the hosted replicas; returns the entries removed."""
    work: Work = []
    for replica in multiraft.replicas.values():
        spec = topics.get(replica.topic)
        if spec is not None and (spec.retention_bytes or spec.retention_ms):
            work.append((replica, spec.retention_bytes or None, spec.retention_ms or None))
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    removed = 0
    # one line per cut up to a budget, then one summary line for the pass
    cuts = EventBudget(log, "retention_summary", per_window=RETENTION_LOG_BUDGET, window_s=1e9)
    for start in range(0, len(work), RETENTION_CHUNK):  # a few per round: short rounds
        chunk = work[start : start + RETENTION_CHUNK]
        removed += cast(
            int,
            await multiraft.maintain(partial(_retain, multiraft.replicas, chunk, now_ms, cuts)),
        )
    cuts.flush()
    return removed


def _retain(
    hosted: Mapping[str, Replica], work: Work, now_ms: int, cuts: EventBudget | None = None
) -> int:
    """Storage thread, within a round: compacts each replica's log to what its retention keeps,
    never past its applied index. Returns the entries removed."""
    removed = 0
    for replica, retention_bytes, retention_ms in work:
        if hosted.get(replica.group) is not replica:
            continue  # closed since (a deleted topic, a retired replica)
        try:
            cut = replica.segmented.retention_cut(now_ms, retention_bytes, retention_ms)
            cut = min(cut, replica.node.applied_index + 1)
            first = replica.log.first_index
            if cut > first:
                offset_before = replica.segmented.first_offset
                replica.log.compact(cut)
                removed += cut - first
                if cuts is not None:
                    cuts(
                        "retention_cut", topic=replica.topic, partition=replica.partition,
                        entries_removed=cut - first, log_start_before=offset_before,
                        log_start=replica.segmented.first_offset,
                        retention_bytes=retention_bytes or 0, retention_ms=retention_ms or 0,
                    )  # fmt: skip
        except Exception as error:
            if storage_failure(error) is not None:
                raise  # a failed write or fsync stops the node (`MultiRaft.maintain`)
            log.exception("applying retention to %s failed", replica.group)
    return removed


async def apply_timer_retention(multiraft: MultiRaft, keep: Mapping[str, int]) -> int:
    """Timer logs (`cluster.timers`) have no time or size retention: each hosted one named in
    `keep` (group -> the lowest offset a pending timer or the last plan still needs) drops its
    whole sealed segments wholly below that offset, never past its applied index. Returns the
    entries removed."""
    if not keep:
        return 0
    return cast(int, await multiraft.maintain(partial(_retain_timers, multiraft.replicas, keep)))


def _retain_timers(hosted: Mapping[str, Replica], keep: Mapping[str, int]) -> int:
    removed = 0
    for group, offset in keep.items():
        replica = hosted.get(group)
        if replica is None:
            continue
        try:
            segmented = replica.segmented
            if offset >= segmented.next_offset:
                index = replica.log.last_index + 1
            elif offset <= segmented.first_offset:
                continue
            else:
                index = segmented.find_offset(offset)
            cut = min(segmented.cut_keeping(index), replica.node.applied_index + 1)
            first = replica.log.first_index
            if cut > first:
                replica.log.compact(cut)
                removed += cut - first
                log.info("timer log %s: %d entries below offset %d removed (fired or rolled forward)", group,
                         cut - first, offset)  # fmt: skip
        except Exception as error:
            if storage_failure(error) is not None:
                raise
            log.exception("applying retention to the timer log %s failed", group)
    return removed
