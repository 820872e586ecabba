"""Delayed delivery as a pure core: the pending timers of one timer partition folded from its
timer log, the near window in memory and the rest counted per on-disk bucket, and the leader's
fire plans (exactly once across failover), and roll-forward (a copy supersedes its original, so
long timers never pin the timer log). No I/O, no clock: the node (`cluster/timers*.py`)
feeds it and carries its plans out; `timers/sim` checks its promises under a seeded simulation."""

from timers.book import TimerBook, bucket_of
from timers.errors import InvalidTimer, TimerError
from timers.faults import FAULT_NAMES, NO_FAULTS, TimerFaults
from timers.rolls import RollRound, roll_round
from timers.types import (
    DEFAULT_MAX_DELAY_MS,
    DELIVER_AT_HEADER,
    FLOOR_HEADER,
    PLAN_HEADER,
    ROLLED_HEADER,
    Floor,
    Plan,
    Rolled,
    TimerBatch,
    TimerConfig,
    timer_topic,
)

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "DELIVER_AT_HEADER",
    "FAULT_NAMES",
    "FLOOR_HEADER",
    "NO_FAULTS",
    "PLAN_HEADER",
    "ROLLED_HEADER",
    "Floor",
    "InvalidTimer",
    "Plan",
    "RollRound",
    "Rolled",
    "TimerBatch",
    "TimerBook",
    "TimerConfig",
    "TimerError",
    "TimerFaults",
    "bucket_of",
    "roll_round",
    "timer_topic",
]
