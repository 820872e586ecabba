"""The shell's Ticker (`cluster.clock`): the real one ticks on its schedule, catches up a short
lateness and restarts its schedule after a long pause; the fake one ticks exactly as advanced."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.clock import MAX_BEHIND_TICKS, FakeTicker, LoopTicker, TickerError, ticker_or_loop

INTERVAL_S = 0.05


async def _stop(ticker: LoopTicker) -> None:
    stopping = asyncio.ensure_future(ticker.stop())
    done, _ = await asyncio.wait({stopping}, timeout=5)
    assert stopping in done, "stop() did not end the ticking within 5 s"


async def _run(
    ticker: LoopTicker, count: int, pause_at: int = 0, pause_s: float = 0.0
) -> list[tuple[float, float]]:
    """(scheduled `at`, loop time seen) of the first `count` ticks; the tick numbered `pause_at`
    blocks the event loop for `pause_s`, as a stalled process would."""
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, float]] = []
    done = asyncio.Event()

    def on_tick(at: float) -> None:
        seen.append((at, loop.time()))
        if len(seen) == pause_at:
            time.sleep(pause_s)  # deliberately blocks the loop: the pause under test
        if len(seen) >= count:
            done.set()

    ticker.start(on_tick)
    try:
        await asyncio.wait_for(done.wait(), timeout=10 + count * INTERVAL_S)
    finally:
        await _stop(ticker)
    return seen


def test_a_loop_ticker_ticks_on_its_schedule_and_never_early() -> None:
    async def scenario() -> tuple[LoopTicker, list[tuple[float, float]], float]:
        ticker = LoopTicker(INTERVAL_S)
        started = asyncio.get_running_loop().time()
        seen = await _run(ticker, 10)
        return ticker, seen, asyncio.get_running_loop().time() - started

    ticker, seen, elapsed_s = asyncio.run(scenario())
    assert len(seen) == 10
    for k, (at, now) in enumerate(seen, start=1):
        assert at == pytest.approx(ticker.started_at + k * INTERVAL_S, rel=0, abs=1e-6)
        assert now >= at  # never before its time
    # on time, within a tolerance a loaded 2-core machine keeps: no tick late by a whole interval
    # on average, and ten ticks take ten intervals, not fewer and not many more
    assert sum(now - at for at, now in seen) / len(seen) < INTERVAL_S
    assert 10 * INTERVAL_S <= elapsed_s < 10 * INTERVAL_S + 2.0


def test_a_loop_ticker_catches_up_a_short_lateness_tick_by_tick() -> None:
    ticker = LoopTicker(INTERVAL_S)
    # tick 2 stalls the loop 4 intervals (within MAX_BEHIND_TICKS): ticks 3..6 come back to back
    seen = asyncio.run(_run(ticker, 10, pause_at=2, pause_s=4 * INTERVAL_S))
    assert [round((at - ticker.started_at) / INTERVAL_S) for at, _ in seen] == list(range(1, 11))
    burst = [now for _, now in seen[2:6]]
    assert burst[-1] - burst[0] < 2 * INTERVAL_S  # a burst, not one tick per interval


def test_a_loop_ticker_restarts_its_schedule_after_a_long_pause() -> None:
    ticker = LoopTicker(INTERVAL_S)
    pause_s = (MAX_BEHIND_TICKS + 5) * INTERVAL_S
    seen = asyncio.run(_run(ticker, 6, pause_at=2, pause_s=pause_s))
    _, (second, _), (resumed, resumed_seen), *after = seen
    assert second == pytest.approx(ticker.started_at + 2 * INTERVAL_S, rel=0, abs=1e-6)
    # the missed ticks are not replayed: the third tick is the present, the rest follow it
    assert resumed >= second + pause_s
    assert 0 <= resumed_seen - resumed < INTERVAL_S
    for k, (at, _) in enumerate(after, start=1):
        assert at == pytest.approx(resumed + k * INTERVAL_S, rel=0, abs=1e-6)


def test_a_loop_ticker_stops_ticking_when_stopped() -> None:
    async def scenario() -> int:
        ticks: list[float] = []
        ticker = LoopTicker(0.01)
        ticker.start(ticks.append)
        deadline = asyncio.get_running_loop().time() + 10
        while len(ticks) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await _stop(ticker)
        stopped_at = len(ticks)
        await asyncio.sleep(0.05)  # five intervals in which a live ticker would tick
        assert len(ticks) == stopped_at
        return stopped_at

    assert asyncio.run(scenario()) >= 2


def test_a_fake_ticker_ticks_exactly_as_advanced() -> None:
    ticker = FakeTicker(INTERVAL_S, started_at=100.0)
    ticks: list[float] = []
    ticker.start(ticks.append)
    ticker.advance(0)
    assert ticks == []
    ticker.advance(3)
    assert ticks == pytest.approx([100.05, 100.1, 100.15])
    ticker.advance()
    assert len(ticks) == ticker.ticks == 4 and ticker.now() == pytest.approx(100.2)


@pytest.mark.parametrize("ticks", [-1, 1.5, True, "2"])
def test_a_fake_ticker_refuses_a_bad_advance_and_ticks_nothing(ticks: object) -> None:
    ticker = FakeTicker(INTERVAL_S)
    seen: list[float] = []
    ticker.start(seen.append)
    with pytest.raises(TickerError, match=f"cannot advance by {ticks!r} ticks"):
        ticker.advance(ticks)  # type: ignore[arg-type]
    assert seen == [] and ticker.ticks == 0


def test_a_ticker_used_out_of_turn_or_given_a_bad_interval_says_so() -> None:
    unstarted = FakeTicker(INTERVAL_S)
    with pytest.raises(TickerError, match="not started"):
        unstarted.advance(1)
    unstarted.start(lambda at: None)
    with pytest.raises(TickerError, match="already started"):
        unstarted.start(lambda at: None)
    asyncio.run(unstarted.stop())
    with pytest.raises(TickerError, match="stopped"):
        unstarted.advance(1)
    for interval_s in (0.0, -0.1, float("nan")):
        with pytest.raises(TickerError, match="tick interval"):
            LoopTicker(interval_s)


def test_a_host_refuses_a_ticker_of_another_interval() -> None:
    assert isinstance(ticker_or_loop(None, INTERVAL_S), LoopTicker)
    fake = FakeTicker(INTERVAL_S)
    assert ticker_or_loop(fake, INTERVAL_S) is fake
    with pytest.raises(TickerError, match=r"ticker interval 0.1 s is not the tick 0.05 s"):
        ticker_or_loop(FakeTicker(0.1), INTERVAL_S)


def test_each_tickers_now_is_the_clock_its_ticks_are_on() -> None:
    """`now()` is what time-based decisions read: on the fake, only `advance` moves it; on the
    real one, each tick's `at` is on it and not ahead of it."""
    fake = FakeTicker(INTERVAL_S, started_at=7.0)
    assert fake.now() == 7.0  # before start: its origin
    fake.start(lambda at: None)
    fake.advance(2)
    assert fake.now() == pytest.approx(7.1)

    async def scenario() -> list[tuple[float, float]]:
        ticker = LoopTicker(INTERVAL_S)
        seen: list[tuple[float, float]] = []
        done = asyncio.Event()

        def on_tick(at: float) -> None:
            seen.append((at, ticker.now()))
            if len(seen) >= 3:
                done.set()

        ticker.start(on_tick)
        try:
            await asyncio.wait_for(done.wait(), timeout=10)
        finally:
            await _stop(ticker)
        assert ticker.now() == pytest.approx(asyncio.get_running_loop().time(), abs=0.01)
        return seen

    seen = asyncio.run(scenario())
    # late by at most MAX_BEHIND_TICKS intervals (later, the schedule restarts at the present)
    assert all(at <= now < at + (MAX_BEHIND_TICKS + 1) * INTERVAL_S for at, now in seen), seen
