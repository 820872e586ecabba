"""A timer slot's wait between plans (`cluster.timers.Slot._wait`): with two plans outstanding
(`timers.types`) a plan already due waits for a firing under way to end, not for its due time,
which is past: the slot's loop must not spin (a wait of 0 ms each turn) while it waits."""

from __future__ import annotations

import asyncio
import time

from cluster.copy_produce import CopyProducer
from cluster.timers import PLAN_AHEAD_MS, Slot, TimerHost
from timers.book import TimerBook
from timers.types import TimerBatch


def _nobody(*args: object) -> None:
    raise AssertionError(f"not expected to be called ({args})")


def _slot() -> Slot:
    slot = Slot.__new__(Slot)  # only what `_wait` reads: the host's settings and the wake
    slot.host = TimerHost(
        topics=dict,
        replicas=dict,
        propose=lambda proposal: None,
        copies=CopyProducer(_nobody, _nobody),  # type: ignore[arg-type]
        tick_s=0.05,
        write_timeout_s=1.0,
    )
    slot._wake = asyncio.Event()
    return slot


async def _waited_s(*, blocked: bool, firing_s: float) -> float:
    slot = _slot()
    book = TimerBook(slot.host.config)
    book.restore({}, None)
    now = int(time.time() * 1000)
    book.buckets_to_load(now)
    book.accepted(TimerBatch(now - 5, 0, 1))  # due: a plan is to be made at once
    firing = asyncio.get_running_loop().create_task(asyncio.sleep(firing_s))
    started = time.monotonic()
    await slot._wait(book, now, [firing], blocked=blocked)
    waited = time.monotonic() - started
    firing.cancel()
    return waited


def test_a_due_plan_blocked_by_two_plans_outstanding_waits_for_the_firing() -> None:
    # blocked: until the firing under way ends (not 0 ms: the loop would spin meanwhile)
    waited = asyncio.run(_waited_s(blocked=True, firing_s=0.3))
    assert 0.25 <= waited < 2.0, waited
    # not blocked: the plan is made at once (its time, PLAN_AHEAD_MS before due, is past)
    waited = asyncio.run(_waited_s(blocked=False, firing_s=0.3))
    assert waited < PLAN_AHEAD_MS / 1000, waited
