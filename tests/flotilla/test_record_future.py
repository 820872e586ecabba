"""RecordFuture: the producer's per-record future shares its batch's lock, and must still behave
as a concurrent.futures.Future for every waiter."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from flotilla.producer import BatchOutcome, RecordFuture, fail_batch, settle_batch
from flotilla.types import RecordMetadata


def _batch(n: int) -> tuple[threading.Condition, list[RecordFuture]]:
    outcome = BatchOutcome("t", 0)
    return outcome.condition, [RecordFuture(outcome, position) for position in range(n)]


def _settle(condition: threading.Condition, futures: list[RecordFuture]) -> None:
    with condition:
        for offset, future in enumerate(futures):
            future.set_result(RecordMetadata("t", 0, offset))


def _wait(future: RecordFuture, errors: list[BaseException], timeout: float | None) -> None:
    try:
        future.result(timeout=timeout)
    except BaseException as error:  # collected for the test's assertion
        errors.append(error)


def test_results_callbacks_wait_and_as_completed() -> None:
    condition, futures = _batch(5)
    seen: list[int] = []
    futures[2].add_done_callback(lambda f: seen.append(f.result().offset))
    assert not futures[0].done() and not futures[0].cancel()
    with pytest.raises(concurrent.futures.TimeoutError):
        futures[0].result(timeout=0.01)
    threading.Timer(0.05, _settle, (condition, futures)).start()
    done, pending = concurrent.futures.wait(futures, timeout=10)
    assert len(done) == 5 and not pending
    assert sorted(f.result().offset for f in concurrent.futures.as_completed(futures)) == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert seen == [2]
    futures[3].add_done_callback(lambda f: seen.append(f.result().offset))  # runs at once
    assert seen == [2, 3]


def test_exceptions_reach_every_waiter() -> None:
    condition, futures = _batch(3)
    with condition:
        for future in futures:
            future.set_exception(RuntimeError("boom"))
    for future in futures:
        assert isinstance(future.exception(timeout=1), RuntimeError)
        with pytest.raises(RuntimeError, match="boom"):
            future.result(timeout=1)


def test_waiters_on_later_futures_never_wake_early() -> None:
    """Waiters blocked on the last futures of a batch must not see a spurious timeout while the
    batch's first futures settle (they share one condition)."""
    for _ in range(20):
        condition, futures = _batch(200)
        errors: list[BaseException] = []
        waiters = [threading.Thread(target=_wait, args=(f, errors, 30)) for f in futures[-10:]]
        for thread in waiters:
            thread.start()
        _settle(condition, futures)
        for thread in waiters:
            thread.join(timeout=30)
        assert errors == []


def test_settling_outside_the_shared_lock_is_caught() -> None:
    """The broken way — settling the batch's futures one by one without holding the shared
    condition — wakes a waiter on a later future before its result is set: that waiter raises
    TimeoutError although it waited without a timeout. The test above would catch it."""
    hits = 0
    for _ in range(50):
        condition, futures = _batch(2000)
        errors: list[BaseException] = []
        waiter = threading.Thread(target=_wait, args=(futures[-1], errors, None))
        waiter.start()
        while not condition._waiters:  # type: ignore[attr-defined]  # the waiter is parked
            pass
        for offset, future in enumerate(futures):  # broken: no shared lock around the batch
            future.set_result(RecordMetadata("t", 0, offset))
            if offset % 100 == 99:
                # let the woken waiter run now, as a preempted settler would: without this the
                # settler may finish inside one GIL switch interval and the race goes unseen
                time.sleep(0.001)
        waiter.join(timeout=30)
        hits += any(isinstance(e, concurrent.futures.TimeoutError) for e in errors)
        if hits:
            break
    assert hits, "settling outside the lock should let a waiter wake early"


def test_a_batch_settles_at_once_and_each_record_reads_its_own_offset() -> None:
    """`_settle` sets the batch's base once, under the shared lock: every future reads
    base + its position, waiters and callbacks wake, and only the futures something waits on
    are visited (a batch of a thousand unwatched records costs the same as one)."""
    outcome = BatchOutcome("t", 3)
    futures = [RecordFuture(outcome, position) for position in range(1000)]
    seen: list[int] = []
    futures[10].add_done_callback(lambda f: seen.append(f.result().offset))
    waited: list[set[concurrent.futures.Future[RecordMetadata[int]]]] = []
    waiter = threading.Thread(
        target=lambda: waited.append(concurrent.futures.wait(futures[-3:], timeout=10).done)
    )
    waiter.start()
    while len(outcome.watched) < 4:  # the callback's future and the three waited on
        time.sleep(0.001)
    assert not any(f.done() for f in futures)
    settle_batch(outcome, 500)
    waiter.join(timeout=10)
    assert [f.result() for f in futures[:2]] == [
        RecordMetadata("t", 3, 500),
        RecordMetadata("t", 3, 501),
    ]
    assert [f.result().offset for f in futures] == list(range(500, 1500))
    assert seen == [510] and waited and len(waited[0]) == 3
    assert len(outcome.watched) == 4
    futures[0].add_done_callback(lambda f: seen.append(f.result().offset))  # runs at once
    assert seen == [510, 500]
    fail_batch(outcome, RuntimeError("late"))  # a batch settles once
    assert futures[5].exception() is None and futures[5].result().offset == 505


def test_a_failed_batch_fails_every_record_and_a_delayed_one_has_no_offset() -> None:
    outcome = BatchOutcome("t", 0)
    futures = [RecordFuture(outcome, position) for position in range(50)]
    completed: list[BaseException | None] = []
    waiter = threading.Thread(
        target=lambda: completed.extend(
            f.exception() for f in concurrent.futures.as_completed(futures, timeout=10)
        )
    )
    waiter.start()
    while len(outcome.watched) < 50:
        time.sleep(0.001)
    fail_batch(outcome, RuntimeError("boom"))
    waiter.join(timeout=10)
    assert len(completed) == 50 and all(isinstance(e, RuntimeError) for e in completed)
    with pytest.raises(RuntimeError, match="boom"):
        futures[49].result(timeout=1)
    delayed = BatchOutcome("t", 1)
    delayed.deliver_at_ms = 1_700_000_000_000
    records = [RecordFuture(delayed, position) for position in range(2)]
    settle_batch(delayed, 7)  # a delayed batch's base is its place in the timer log, not an offset
    assert [r.result() for r in records] == [RecordMetadata("t", 1, None, 1_700_000_000_000)] * 2
