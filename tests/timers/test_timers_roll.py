"""Roll-forward (retention never pins disk for long timers): the supersede rule in the book and
the index, the bounded round (`timers.rolls`), the checker's "both-live" check failing on broken
histories, and the issue's case on a scaled clock: retention of "1 h" with "7-day" timers keeps
the log bounded (it is cut) while every timer still fires once; without roll-forward the same
run keeps far more."""

from __future__ import annotations

import pytest

from storage.timer_index import TimerIndex
from timers.book import TimerBook
from timers.errors import InvalidTimer
from timers.faults import TimerFaults
from timers.rolls import roll_round
from timers.sim.checker import TimerChecker, Violation
from timers.sim.world import SIM_CONFIG, TimerSimulation
from timers.types import Plan, Rolled, TimerBatch, TimerConfig

H = 3_600_000
T0 = 1_000 * H
CONFIG = TimerConfig(bucket_ms=H, window_buckets=2, max_plan_records=10, max_plan_batches=3)


def book(faults: TimerFaults | None = None) -> TimerBook:
    b = TimerBook(CONFIG, faults=faults or TimerFaults())
    b.restore({}, None)
    assert b.buckets_to_load(T0) == []
    return b


def test_a_held_original_is_replaced_by_its_copy_and_fires_once_as_the_copy() -> None:
    b = book()
    b.accepted(TimerBatch(T0 + 5_000, 0, 2))
    b.rolled(Rolled(TimerBatch(T0 + 5_000, 40, 2), from_offset=0))
    assert not b.holds(0) and b.holds(40) and b.pending == 2
    plan = b.next_plan(T0 + 5_000)
    assert plan == Plan(0, (TimerBatch(T0 + 5_000, 40, 2),), 0, T0 + 5_000)
    b.rolled(Rolled(TimerBatch(T0 + 5_000, 40, 2), from_offset=0))  # a repeat: ignored
    assert b.pending == 2


def test_a_counted_original_leaves_the_counts_and_the_copy_comes_with_its_bucket() -> None:
    b = book()
    far = T0 + 30 * H
    b.accepted(TimerBatch(far, 0, 3))
    b.rolled(Rolled(TimerBatch(far, 9, 3), from_offset=0))
    assert b.pending == 3 and b.unloaded() == {1030: (3, 1)} and b.loaded_batches == 0


def test_a_copy_of_a_batch_no_longer_pending_is_dead() -> None:
    b = book()
    b.accepted(TimerBatch(T0 + 1_000, 0, 1))
    plan = b.next_plan(T0 + 1_000)
    assert plan is not None
    b.planned(plan)
    b.rolled(Rolled(TimerBatch(T0 + 1_000, 5, 1), from_offset=0))  # fired: the copy is dead
    assert b.pending == 0 and b.next_plan(T0 + 2_000) is None


def test_a_copy_while_its_bucket_is_read_is_held_and_the_original_not_again() -> None:
    b = TimerBook(CONFIG)
    b.restore({1000: (1, 1)}, None)
    assert b.buckets_to_load(T0) == [1000]  # the read starts: it may see the original
    b.rolled(Rolled(TimerBatch(T0 + 7, 11, 1), from_offset=3))
    assert b.pending == 1
    b.load_bucket(1000, [TimerBatch(T0 + 7, 3, 1)])  # a read from before the roll
    assert b.pending == 1 and b.holds(11) and not b.holds(3)


def test_a_copy_that_changes_its_timer_is_refused_and_changes_nothing() -> None:
    b = book()
    b.accepted(TimerBatch(T0 + 5_000, 0, 2))
    with pytest.raises(InvalidTimer, match="a copy keeps both"):
        b.rolled(Rolled(TimerBatch(T0 + 6_000, 40, 2), from_offset=0))
    with pytest.raises(InvalidTimer, match="a copy follows its original"):
        b.rolled(Rolled(TimerBatch(T0 + 5_000, 0, 2), from_offset=0))
    assert b.holds(0) and not b.holds(40) and b.pending == 2


def test_fault_roll_keeps_original_leaves_both_live() -> None:
    b = book(TimerFaults(roll_keeps_original=True))
    b.accepted(TimerBatch(T0 + 5_000, 0, 2))
    b.rolled(Rolled(TimerBatch(T0 + 5_000, 40, 2), from_offset=0))
    assert b.holds(0) and b.holds(40)


def test_a_round_is_bounded_and_its_floor_never_passes_what_it_left() -> None:
    pending = [TimerBatch(T0, offset, 1) for offset in (50, 10, 30, 20)]
    assert roll_round(40, pending, [], 10).copies == tuple(
        TimerBatch(T0, o, 1) for o in (10, 20, 30)
    )
    assert roll_round(40, pending, [], 10).floor == 40
    assert roll_round(40, pending, [], 2).floor == 30  # offset 30 waits for the next round
    assert roll_round(40, pending, [25], 10).floor == 25  # a bucket not read this round
    assert roll_round(40, [], [], 10).floor == 40
    with pytest.raises(InvalidTimer, match="roll limit 0"):
        roll_round(40, pending, [], 0)


def test_the_index_swaps_a_copy_for_its_original_and_a_floor_raises_its_bounds(
    tmp_path: object,
) -> None:
    index = TimerIndex.open(f"{tmp_path}/index", H)
    index.add(TimerBatch(T0 + 5, 0, 2))
    index.add(TimerBatch(T0 + 9, 1, 1))
    index.add(TimerBatch(T0 + 2 * H, 2, 1))
    index.rolled(Rolled(TimerBatch(T0 + 5, 10, 2), from_offset=0))
    assert index.pending == 4 and index.summary() == {1000: (3, 2), 1002: (1, 1)}
    assert index.min_pending_offset() == 0  # a lower bound until the floor (or a read)
    index.rolled(Rolled(TimerBatch(T0 + H, 11, 1), from_offset=7))  # nothing pending there
    assert index.pending == 4
    index.rolled(Rolled(TimerBatch(T0 + 9, 12, 1), from_offset=1))
    index.rolled(Rolled(TimerBatch(T0 + 2 * H, 13, 1), from_offset=2))
    index.floor(10)
    assert index.min_pending_offset() == 0  # applied offset 0: nothing flushed yet
    index.flush(14)
    assert index.min_pending_offset() == 10
    index.close()
    again = TimerIndex.open(f"{tmp_path}/index", H)
    assert again.min_pending_offset() == 10 and again.pending == 4
    assert [b.offset for b in again.bucket(1000)] == [10, 12]
    assert again.buckets_below(13) == {1000: 10, 1002: 10}


# -- the checker ---------------------------------------------------------------------------------


def checker() -> TimerChecker:
    c = TimerChecker(SIM_CONFIG, late_bound_ms=1_000)
    c.committed_batch(TimerBatch(T0, 0, 1), producer=1, sequence=0, now_ms=T0 - 5)
    return c


def test_the_checker_follows_a_roll_and_counts_the_timer_once() -> None:
    c = checker()
    c.committed_roll(Rolled(TimerBatch(T0, 7, 1), 0))
    c.committed_floor(7)
    plan = Plan(0, (TimerBatch(T0, 7, 1),))
    c.plan_made(plan, T0)
    c.landed_batch(plan, 0, T0, T0)
    c.finish()  # the timer landed (as its copy): nothing lost


def test_the_checker_catches_a_copy_of_a_fired_batch_and_a_superseded_plan() -> None:
    c = checker()
    c.committed_roll(Rolled(TimerBatch(T0, 7, 1), 0))
    with pytest.raises(Violation, match="both-live: a copy at offset 9 of offset 0, which is "):
        c.committed_roll(Rolled(TimerBatch(T0, 9, 1), 0))
    with pytest.raises(Violation, match="both-live: plan 0 names offset 0, superseded"):
        c.plan_made(Plan(0, (TimerBatch(T0, 0, 1),)), T0)
    with pytest.raises(Violation, match="both-live: book holds offset 0 beside its copy"):
        c.both_live("book", lambda offset: offset in (0, 7))
    c.both_live("book", lambda offset: offset == 7)


def test_the_checker_catches_both_copies_landing_and_a_floor_above_a_pending_timer() -> None:
    c = checker()
    with pytest.raises(Violation, match="retention: a floor at offset 1 lets the log go"):
        c.committed_floor(1)
    c.committed_roll(Rolled(TimerBatch(T0, 7, 1), 0))
    c.landed_batch(Plan(0, (TimerBatch(T0, 0, 1),)), 0, T0, T0)
    with pytest.raises(Violation, match=r"fired-twice: offset 7 \(a copy of offset 0\)"):
        c.landed_batch(Plan(1, (TimerBatch(T0, 7, 1),)), 0, T0, T0)
    with pytest.raises(Violation, match="retention: the leader needs offset 3"):
        c.needed("the leader", 3, log_start=4)


# -- the case, on the simulator's clock ----------------------------------------------------

HOUR, WEEK = 1_000, 168_000  # scaled: "1 h" of retention, timers up to "7 days" (168 h) ahead


@pytest.mark.parametrize("seed", range(3))
def test_retention_of_an_hour_with_week_long_timers_keeps_the_log_bounded(seed: int) -> None:
    """900 steps of production (about 300 scaled hours), then the drain: every timer fires
    exactly once (the checker), the log is cut as it goes, and the most it ever keeps stays
    bounded (by the pending timers' copies and an hour of writes), well below what the same
    run keeps without roll-forward, where the first week-long timer pins all after it."""
    rolled = TimerSimulation(seed, roll_age_ms=HOUR, far_ms=WEEK)
    rolled.run(900, drain_steps=2_000)  # raises Violation on a broken promise
    pinned = TimerSimulation(seed, roll_age_ms=None, far_ms=WEEK)
    pinned.run(900, drain_steps=2_000)
    print(
        f"seed {seed}: {rolled.stats['records']} records, {rolled.stats['rolls']} copies "
        f"rolled forward; kept at most {rolled.stats['max_retained']} offsets (without "
        f"roll-forward: {pinned.stats['max_retained']})"
    )
    assert rolled.stats["rolls"] > 0 and rolled.stats["cut_records"] > 0
    assert rolled.stats["max_retained"] <= 600
    assert rolled.stats["max_retained"] * 3 < pinned.stats["max_retained"] * 2


def test_a_timer_due_soon_is_not_copied_and_holds_the_floor() -> None:
    pending = [TimerBatch(T0 + 100, 10, 1), TimerBatch(T0 + 50_000, 20, 1)]
    chosen = roll_round(40, pending, [], 10, due_after_ms=T0 + 1_000)
    assert chosen.copies == (TimerBatch(T0 + 50_000, 20, 1),) and chosen.floor == 10
