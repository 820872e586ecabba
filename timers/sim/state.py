"""The simulation's state parts: a replica (its index and how far it folded the log), the
leader (its book and what it has under way), and the statistics a run counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from timers.book import TimerBook
from timers.sim.index_model import IndexLike, IndexStore
from timers.types import Plan, TimerBatch

__all__ = ["STAT_NAMES", "Leader", "Replica"]

STAT_NAMES = (
    "batches",
    "records",
    "past_timers",
    "far_timers",
    "bursts",
    "plans",
    "landed",
    "duplicates",
    "rebases",
    "rebases_after_forget",
    "fire_epochs",
    "behind_answers",
    "in_flight_held",
    "in_flight_answers",
    "pipeline_failures",
    "done_markers",
    "carried_plans",
    "forgotten_producers",
    "quiet_stretches",
    "failovers",
    "tails_lost",
    "crashes_mid_fire",
    "crashes_after_fire",
    "index_crashes",
    "producer_retries",
    "refused_at_acceptance",
    "bucket_loads",
    "slow_reads",
    "failed_reads",
    "roll_rounds",
    "rolls",
    "floors",
    "rolls_lost",
    "crashes_mid_roll",
    "index_rebuilds",
    "remarks",
    "cut_records",
    "max_loaded",
    "max_lateness_ms",
    "max_retained",
)


@dataclass
class Replica:
    store: IndexStore
    index: IndexLike
    applied: int = 0  # log position: records [0, applied) are in the index


@dataclass
class Leader:
    replica: int
    book: TimerBook
    ready_at_ms: int
    inflight: Plan | None = None  # appended, not committed yet
    inflight_position: int = -1  # its place in the log
    firing: Plan | None = None  # committed; its batches from `next_batch` on still to fire
    next_batch: int = 0
    queued: Plan | None = None  # committed while `firing` was fired: its own part, fired next
    rolling: int | None = None  # a roll round appended: the log position of its last record
    # bucket reads under way: (bucket, what the index held when the read ran (None: not yet),
    # the step it was asked for in)
    reads: list[tuple[int, list[TimerBatch] | None, int]] = field(default_factory=list)
