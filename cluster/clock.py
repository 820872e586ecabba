"""Tickers: the shell's one timer loop, real on the event loop or fake in a test's hand.

The pure cores take ticks, not time; the shell's timed work (MultiRaft's ticks and lazy commit
saves, the SWIM host's protocol period, the partition manager's passes) hangs on a `Ticker` that
calls `on_tick(at)` every `interval_s`, where `at` is the tick's place on the schedule, in
seconds of the ticker's clock. The shell's time-based decisions (when a dead member is replaced,
when a leader is handed back, when the graceful hand-off gives up, when an opened replica stops
counting as settling) read the same clock, `ticker.now()`, never the wall clock: so a test that
advances a `FakeTicker` moves them all, and nothing else does.

`LoopTicker` runs on the asyncio event loop. Its schedule is fixed at `start()`:

    at(k) = started_at + k * interval_s        (k = 1, 2, ...)

so the callbacks' own cost does not make the ticks drift. Missed ticks: a loop that wakes late
by at most `MAX_BEHIND_TICKS` intervals (a slow round, a collection) catches up, ticking back to
back; later than that (the process was paused, e.g. SIGSTOP or a VM freeze) it starts the schedule
again from the present, ticking once, rather than replaying the whole pause in a burst that would
expire every election and suspicion timer at once.

`FakeTicker` ticks only when a test calls `advance(ticks)`, synchronously, each tick exactly one
interval after the last: cluster-layer tests run on it as the cores' simulators run on theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from cluster.errors import ClusterError

__all__ = [
    "MAX_BEHIND_TICKS",
    "FakeTicker",
    "LoopTicker",
    "Ticker",
    "TickerError",
    "ticker_or_loop",
]

# a loop later than this many intervals restarts its schedule instead of catching up
MAX_BEHIND_TICKS = 10

OnTick = Callable[[float], object]


class TickerError(ClusterError, ValueError):
    """A ticker used out of turn (started twice, advanced before `start`) or given a bad value."""


class Ticker(Protocol):
    """Calls `on_tick(at)` every `interval_s` seconds from `start()` until `stop()`."""

    @property
    def interval_s(self) -> float: ...

    @property
    def started_at(self) -> float:
        """The schedule's origin on the ticker's clock (valid once started)."""
        ...

    def now(self) -> float:
        """The ticker's clock now, in seconds (monotonic; `at` of each tick is on it)."""
        ...

    def start(self, on_tick: OnTick) -> None: ...

    async def stop(self) -> None:
        """No tick after it returns; an exception raised by `on_tick` (which ended the ticking)
        is raised here."""
        ...


def _check_interval(interval_s: float) -> float:
    if not interval_s > 0:  # also refuses NaN
        raise TickerError(f"tick interval {interval_s!r} s is invalid: must be > 0")
    return interval_s


class _Interval:
    """What both tickers state alike: their interval, and when their clock started."""

    def __init__(self, interval_s: float, started_at: float) -> None:
        self._interval_s = _check_interval(interval_s)
        self._started_at = started_at

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @property
    def started_at(self) -> float:
        return self._started_at


class LoopTicker(_Interval):
    """The real ticker: one asyncio task on the running loop (clock: `loop.time()`)."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(interval_s, 0.0)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        # before start: time.monotonic, the clock asyncio's loop.time() reads
        return self._loop.time() if self._loop is not None else time.monotonic()

    def start(self, on_tick: OnTick) -> None:
        if self._task is not None:
            raise TickerError("the ticker was already started: start it once")
        loop = self._loop = asyncio.get_running_loop()
        self._started_at = loop.time()
        self._task = loop.create_task(self._run(loop, on_tick))

    async def _run(self, loop: asyncio.AbstractEventLoop, on_tick: OnTick) -> None:
        interval_s = self._interval_s
        next_at = self._started_at
        while True:
            next_at += interval_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > MAX_BEHIND_TICKS * interval_s:
                next_at = loop.time()  # paused: do not replay the missed ticks in a burst
            on_tick(next_at)

    async def stop(self) -> None:
        task = self._task
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class FakeTicker(_Interval):
    """A ticker a test drives: `advance(ticks)` ticks that many times, now, one interval apart
    on its own clock (which starts at `started_at`); nothing else makes it tick."""

    def __init__(self, interval_s: float, started_at: float = 0.0) -> None:
        super().__init__(interval_s, started_at)
        self._now = started_at  # the clock: started_at + ticks so far * interval_s
        self.ticks = 0
        self._on_tick: OnTick | None = None
        self._stopped = False

    def now(self) -> float:
        return self._now

    def start(self, on_tick: OnTick) -> None:
        if self._on_tick is not None:
            raise TickerError("the ticker was already started: start it once")
        self._on_tick = on_tick

    def advance(self, ticks: int = 1) -> None:
        if isinstance(ticks, bool) or not isinstance(ticks, int) or ticks < 0:
            raise TickerError(f"cannot advance by {ticks!r} ticks: give a whole number >= 0")
        if self._on_tick is None or self._stopped:
            state = "stopped" if self._stopped else "not started"
            raise TickerError(f"cannot advance a ticker that is {state}: start() it first")
        for _ in range(ticks):
            self.ticks += 1
            self._now = self._started_at + self.ticks * self._interval_s
            self._on_tick(self._now)

    async def stop(self) -> None:
        self._stopped = True


def ticker_or_loop(ticker: Ticker | None, interval_s: float) -> Ticker:
    """`ticker` (checked to tick every `interval_s`), or a `LoopTicker` of `interval_s`."""
    if ticker is None:
        return LoopTicker(interval_s)
    if ticker.interval_s != interval_s:
        raise TickerError(
            f"ticker interval {ticker.interval_s!r} s is not the tick {interval_s!r} s: "
            "give a ticker of the tick"
        )
    return ticker
