"""Delayed delivery as a pure core: the pending timers of one timer partition folded from its
timer log, the near window in memory and the rest counted per on-disk bucket, and the leader's
fire plans (exactly once across failover). No I/O, no clock: the node (`cluster/timers*.py`)
feeds it and carries its plans out; `timers/sim` checks its promises under a seeded simulation."""

from timers.book import TimerBook, bucket_of
from timers.errors import InvalidTimer, TimerError
from timers.faults import FAULT_NAMES, NO_FAULTS, TimerFaults
from timers.types import (
    DEFAULT_MAX_DELAY_MS,
    DELIVER_AT_HEADER,
    PLAN_HEADER,
    Plan,
    TimerBatch,
    TimerConfig,
    timer_topic,
)

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "DELIVER_AT_HEADER",
    "FAULT_NAMES",
    "NO_FAULTS",
    "PLAN_HEADER",
    "InvalidTimer",
    "Plan",
    "TimerBatch",
    "TimerBook",
    "TimerConfig",
    "TimerError",
    "TimerFaults",
    "bucket_of",
    "timer_topic",
]
