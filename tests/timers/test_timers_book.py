"""TimerBook, rule by rule: never before due, (due, offset) order, plan limits and sequences,
the near window in memory and the rest counted per bucket, buckets loaded on demand, a timer
accepted anywhere (past, near, far, in a bucket not loaded yet) never lost and never held twice,
restore from an index's summary, and each deliberate fault breaking the rule its name says."""

from __future__ import annotations

import random

import pytest

from timers.book import FAULT_EARLY_MS, TimerBook, bucket_of
from timers.errors import InvalidTimer
from timers.faults import TimerFaults
from timers.types import Plan, TimerBatch, TimerConfig

H = 3_600_000
T0 = 1_000 * H  # bucket 1000 starts here
CONFIG = TimerConfig(bucket_ms=H, window_buckets=2, max_plan_records=10, max_plan_batches=3)


def book(faults: TimerFaults | None = None, now: int = T0) -> TimerBook:
    b = TimerBook(CONFIG, faults=faults or TimerFaults())
    b.restore({}, None)
    assert b.buckets_to_load(now) == []  # the window is now known: buckets 1000..1002
    return b


def fire(b: TimerBook, now: int) -> list[TimerBatch]:
    """Plans everything due at `now` (as a leader would, committing each plan)."""
    fired: list[TimerBatch] = []
    while (plan := b.next_plan(now)) is not None:
        b.planned(plan)
        fired.extend(plan.batches)
    return fired


def test_a_timer_is_never_planned_before_its_due_time() -> None:
    b = book()
    b.accepted(TimerBatch(T0 + 5_000, 0, 1))
    assert b.next_plan(T0 + 4_999) is None
    plan = b.next_plan(T0 + 5_000)
    assert plan == Plan(0, (TimerBatch(T0 + 5_000, 0, 1),), 0, T0 + 5_000)
    assert b.next_due_ms() == T0 + 5_000


def test_plans_go_in_due_then_offset_order() -> None:
    b = book()
    for due, offset in [(30, 0), (10, 1), (10, 2), (20, 3), (10, 4)]:
        b.accepted(TimerBatch(T0 + due, offset, 1))
    fired = fire(b, T0 + 100)
    assert [(x.due_ms - T0, x.offset) for x in fired] == [
        (10, 1),
        (10, 2),
        (10, 4),
        (20, 3),
        (30, 0),
    ]


def test_next_plan_changes_nothing_until_planned() -> None:
    b = book()
    b.accepted(TimerBatch(T0, 0, 2))
    first = b.next_plan(T0)
    assert first is not None and b.next_plan(T0) == first
    assert b.pending == 2 and b.last_plan is None
    b.planned(first)
    assert b.next_plan(T0) is None and b.pending == 0 and b.last_plan == first


def test_plan_limits_and_sequences() -> None:
    b = book()
    counts = [4, 4, 4, 1, 1, 1, 1, 25, 2]
    for offset, count in enumerate(counts):
        b.accepted(TimerBatch(T0 + offset, offset, count))
    plans = []
    while (plan := b.next_plan(T0 + 100)) is not None:
        b.planned(plan)
        plans.append(plan)
    # at most 10 records (a larger batch alone) and 3 batches; sequences contiguous from 0
    assert [[x.record_count for x in p.batches] for p in plans] == [
        [4, 4],
        [4, 1, 1],
        [1, 1],
        [25],
        [2],
    ]
    assert [p.sequence for p in plans] == [0, 8, 14, 16, 41]
    assert b.pending == 0


def test_far_timers_are_counted_not_held_and_loaded_when_the_window_reaches_them() -> None:
    b = book()
    far = TimerBatch(T0 + 5 * H + 7, 0, 3)  # bucket 1005: beyond the window (1000..1002)
    b.accepted(far)
    assert b.loaded_batches == 0 and b.pending == 3
    assert b.unloaded() == {1005: (3, 1)}
    assert b.buckets_to_load(T0 + 2 * H) == []  # window 1002..1004
    assert b.buckets_to_load(T0 + 3 * H) == [1005]
    b.load_bucket(1005, [far])  # the index gives it back
    assert b.unloaded() == {} and b.loaded_batches == 1 and b.pending == 3
    assert b.next_plan(far.due_ms - 1) is None
    assert fire(b, far.due_ms) == [far]


def test_a_timer_accepted_into_a_bucket_not_loaded_yet_is_neither_lost_nor_held_twice() -> None:
    b = TimerBook(CONFIG)
    on_disk = TimerBatch(T0 + 10, 0, 1)
    b.restore({1000: (1, 1)}, None)  # the index holds bucket 1000, not loaded yet
    late = TimerBatch(T0 + 5, 1, 2)  # committed while the bucket is being read
    b.accepted(late)
    assert b.unloaded() == {1000: (3, 2)} and b.pending == 3
    assert b.buckets_to_load(T0) == [1000]
    b.load_bucket(1000, [on_disk, late])  # the index has both by now
    b.accepted(late)  # and a replay of the log repeats it: held once
    assert b.loaded_batches == 2 and b.pending == 3
    assert fire(b, T0 + 10) == [late, on_disk]
    assert b.pending == 0


def test_a_timer_due_in_the_past_fires_at_once_and_an_old_bucket_is_loaded() -> None:
    b = TimerBook(CONFIG)
    b.restore({990: (1, 1)}, None)  # a bucket ten hours old, still pending (after downtime)
    b.accepted(TimerBatch(T0 - 3 * H, 5, 1))  # in the past, bucket 997
    assert sorted(b.unloaded()) == [990, 997]
    assert b.buckets_to_load(T0) == [990, 997]
    b.load_bucket(990, [TimerBatch(990 * H, 1, 1)])
    b.load_bucket(997, [TimerBatch(T0 - 3 * H, 5, 1)])
    assert [x.offset for x in fire(b, T0)] == [1, 5]
    b.accepted(TimerBatch(T0 - 2 * H, 9, 1))  # the window is known now: held at once
    assert b.loaded_batches == 1 and [x.offset for x in fire(b, T0)] == [9]


def test_restore_continues_the_sequence_and_repeats_are_ignored() -> None:
    last = Plan(40, (TimerBatch(T0 - 1, 3, 5),), 0, T0 - 1)
    b = TimerBook(CONFIG)
    b.restore({1000: (2, 1)}, last)
    assert b.last_plan == last and b.pending == 2
    b.load_bucket(1000, [TimerBatch(T0 + 1, 4, 2), TimerBatch(T0 - 1 + H, 3, 5)])
    # offset 3 is the last plan's (fired): a lagging index's copy is not held again
    assert b.loaded_batches == 1
    b.accepted(TimerBatch(T0 - 1, 3, 5))  # a replay of the log: fired already
    plan = b.next_plan(T0 + 1)
    assert plan == Plan(45, (TimerBatch(T0 + 1, 4, 2),), 0, T0 + 1)
    b.planned(plan)
    b.planned(last)  # a repeat of an older plan changes nothing
    assert b.last_plan == plan and b.pending == 0


def test_memory_is_the_near_window() -> None:
    rng = random.Random(3)
    b = book()
    for offset in range(5_000):
        b.accepted(TimerBatch(T0 + rng.randrange(40 * 24 * H), offset, 1))
    near = b.loaded_batches
    assert near < 5_000 * 4 / (40 * 24)  # about 3 hours of 960 held
    assert b.pending == 5_000
    assert all(bucket > 1002 for bucket in b.unloaded())


def test_bad_input_is_refused_and_changes_nothing() -> None:
    b = book()
    with pytest.raises(InvalidTimer, match="0 records"):
        b.accepted(TimerBatch(T0, 0, 0))
    with pytest.raises(InvalidTimer, match="not in bucket 1001"):
        b.load_bucket(1001, [TimerBatch(T0, 1, 1)])
    with pytest.raises(InvalidTimer, match="zero together"):
        b.restore({1000: (0, 1)}, None)
    with pytest.raises(InvalidTimer, match="bucket_ms = 0"):
        TimerBook(TimerConfig(bucket_ms=0))
    assert b.pending == 0


def test_a_random_history_matches_a_model() -> None:
    """Accepts, loads, plans and restores at random against a plain model: every timer fires
    once, never early, in order, and `pending` is right throughout."""
    rng = random.Random(11)
    index: dict[int, TimerBatch] = {}  # the on-disk index: pending batches
    b = TimerBook(CONFIG)
    b.restore({}, None)
    now, offset = T0, 0
    fired: list[tuple[TimerBatch, int]] = []
    for _ in range(3_000):
        action = rng.random()
        if action < 0.5:
            due = now + rng.choice([-5_000, 0, 1_000, H, 3 * H, 20 * H])
            batch = TimerBatch(due, offset, rng.randint(1, 4))
            offset += 1
            index[batch.offset] = batch
            b.accepted(batch)
        elif action < 0.6:
            summary: dict[int, tuple[int, int]] = {}
            for x in index.values():
                r, n = summary.get(bucket_of(x.due_ms, H), (0, 0))
                summary[bucket_of(x.due_ms, H)] = (r + x.record_count, n + 1)
            b = TimerBook(CONFIG)
            b.restore(summary, None)
        else:
            now += rng.randrange(H // 2)
        for bucket in b.buckets_to_load(now):
            b.load_bucket(bucket, [x for x in index.values() if bucket_of(x.due_ms, H) == bucket])
        while (plan := b.next_plan(now)) is not None:
            b.planned(plan)
            for x in plan.batches:
                fired.append((x, now))
                del index[x.offset]
        assert b.pending == sum(x.record_count for x in index.values())
    assert len({x.offset for x, _ in fired}) == len(fired)
    assert all(x.due_ms <= at for x, at in fired)


# -- each fault breaks its rule ----------------------------------------------------------------


def test_fault_fire_twice_plans_a_batch_again() -> None:
    b = book(TimerFaults(fire_twice=True))
    b.accepted(TimerBatch(T0, 0, 1))
    first = b.next_plan(T0)
    assert first is not None
    b.planned(first)
    again = b.next_plan(T0)
    assert again is not None and again.batches == first.batches


def test_fault_fire_early_plans_before_the_due_time() -> None:
    b = book(TimerFaults(fire_early=True))
    b.accepted(TimerBatch(T0 + FAULT_EARLY_MS, 0, 1))
    assert b.next_plan(T0) is not None


def test_fault_forget_last_plan_loses_the_plan_to_fire_again() -> None:
    last = Plan(0, (TimerBatch(T0, 0, 1),))
    b = TimerBook(CONFIG, faults=TimerFaults(forget_last_plan=True))
    b.restore({}, last)
    assert b.last_plan is None


def test_fault_skip_far_bucket_never_loads_a_bucket_read_ahead() -> None:
    b = TimerBook(CONFIG, faults=TimerFaults(skip_far_bucket=True))
    b.restore({1001: (1, 1)}, None)
    assert b.buckets_to_load(T0) == []
    assert b.buckets_to_load(T0 + H) == []  # not even once due
    assert b.pending == 1


# -- a bucket read while records commit (the node reads the index off the event loop) ------------


def test_a_batch_committed_while_its_bucket_is_read_is_not_lost() -> None:
    b = TimerBook(CONFIG)
    b.restore({1001: (1, 1)}, None)
    assert b.buckets_to_load(T0) == [1001]
    on_disk = TimerBatch(T0 + H, 0, 1)
    snapshot = [on_disk]  # the index's entries as the read saw them...
    late = TimerBatch(T0 + H + 5, 1, 1)
    b.accepted(late)  # ...while this one committed (the read missed it)
    assert b.buckets_to_load(T0) == []  # being read: not asked for twice
    b.load_bucket(1001, snapshot)
    assert b.pending == 2 and b.loaded_batches == 2
    assert fire(b, T0 + 2 * H) == [on_disk, late]


def test_a_batch_fired_while_its_bucket_is_read_is_not_held_again() -> None:
    b = TimerBook(CONFIG)
    b.restore({1000: (1, 1)}, None)
    assert b.buckets_to_load(T0) == [1000]
    on_disk, early, later = (
        TimerBatch(T0 + 9, 0, 1),
        TimerBatch(T0 + 1, 1, 1),
        TimerBatch(T0 + 2, 2, 1),
    )
    b.accepted(early)  # committed while the bucket is read: held at once
    assert fire(b, T0 + 1) == [early]
    b.accepted(later)
    assert fire(b, T0 + 2) == [later]  # a second plan: `early` is not the last plan's any more
    b.load_bucket(1000, [on_disk, early, later])  # the read saw them before they fired
    assert b.pending == 1 and b.loaded_batches == 1
    assert fire(b, T0 + 9) == [on_disk]


def test_a_second_load_of_a_bucket_is_ignored() -> None:
    b = book()
    x = TimerBatch(T0 + 1, 0, 1)
    b.accepted(x)  # bucket 1000 is in the window: held, nothing to load
    assert fire(b, T0 + 1) == [x]
    b.accepted(TimerBatch(T0 + 2, 1, 1))
    assert fire(b, T0 + 2) != []
    b.load_bucket(1000, [x])  # a stale read of a bucket nobody asked for: x fired already
    assert b.pending == 0 and b.next_plan(T0 + 10) is None


def test_a_done_marker_follows_a_plan_fired_in_full() -> None:
    b = book()
    assert b.done_marker() is None  # no plan yet
    b.accepted(TimerBatch(T0, 0, 3))
    plan = b.next_plan(T0)
    assert plan is not None
    b.planned(plan)
    marker = b.done_marker()
    assert marker == Plan(3, (), 0, T0)  # the time of the last plan that fired
    b.planned(marker)
    assert b.last_plan == marker and b.done_marker() is None
    b.accepted(TimerBatch(T0, 1, 1))
    assert b.next_plan(T0) == Plan(3, (TimerBatch(T0, 1, 1),), 0, T0)  # the sequence goes on
    again = TimerBook(CONFIG)
    again.restore({}, marker)  # a new leader: nothing to fire again
    assert again.last_plan is not None and again.last_plan.batches == ()
    assert TimerBook(CONFIG, faults=TimerFaults(no_done_marker=True)).done_marker() is None


def test_a_failed_read_is_asked_for_again_and_loses_nothing() -> None:
    b = TimerBook(CONFIG)
    b.restore({1000: (1, 1)}, None)
    assert b.buckets_to_load(T0) == [1000]
    during = TimerBatch(T0 + 2, 1, 1)
    b.accepted(during)  # held: the bucket is being read
    b.load_failed(1000)
    assert b.pending == 2
    assert b.buckets_to_load(T0) == [1000]
    on_disk = TimerBatch(T0 + 1, 0, 1)
    b.load_bucket(1000, [on_disk, during])
    assert b.pending == 2 and b.loaded_batches == 2
    assert fire(b, T0 + 2) == [on_disk, during]


def test_a_plan_made_while_the_last_is_fired_carries_its_batches() -> None:
    """Two plans outstanding (`timers.types`): plan n+1, made while plan n's batches are still
    being fired, lists them again first, so the last plan names every batch whose outcome is
    unknown; folding it releases only its own; a repeat of either is ignored."""
    b = book()
    first, second, third = (TimerBatch(T0 + i, i, 2) for i in range(3))
    for batch in (first, second, third):
        b.accepted(batch)
    plan = b.next_plan(T0)
    assert plan == Plan(0, (first,), 0, T0)
    b.planned(plan)
    carrying = b.next_plan(T0 + 2, carry=True)
    assert carrying == Plan(0, (first, second, third), 0, T0 + 2, 1)
    assert carrying.own == (second, third) and carrying.own_sequence == 2
    assert carrying.own_plan() == Plan(2, (second, third), 0, T0 + 2)
    b.planned(carrying)
    assert b.pending == 0 and b.last_plan == carrying
    b.planned(plan)  # a repeat of the plan it carries: ignored
    b.planned(carrying)  # and of itself
    assert b.last_plan == carrying
    assert b.done_marker() == Plan(6, (), 0, T0 + 2)  # after every batch it names
    # a plan carries only the last plan's own batches, never those that one carried
    b.accepted(TimerBatch(T0 + 3, 3, 1))
    again = b.next_plan(T0 + 3, carry=True)
    assert again is not None and again.batches[:2] == (second, third) and again.carried == 2
    # a new leader restored from the carrying plan fires it all again, from its sequence
    restored = TimerBook(CONFIG)
    restored.restore({}, carrying)
    assert restored.last_plan == carrying and restored.refire() == carrying
    broken = TimerBook(CONFIG, faults=TimerFaults(refire_own_only=True))
    broken.restore({}, carrying)
    assert broken.refire() == carrying.own_plan()
    assert restored.next_plan(T0 + 10) is None  # nothing pending: all of them are planned


def test_a_plan_starting_a_new_epoch_is_not_made_while_the_last_is_fired() -> None:
    b = TimerBook(TimerConfig(bucket_ms=H, fire_renew_ms=1_000))
    b.restore({}, None)
    b.buckets_to_load(T0)
    b.accepted(TimerBatch(T0, 0, 1))
    plan = b.next_plan(T0)
    assert plan is not None
    b.planned(plan)
    later = T0 + 1_001
    b.accepted(TimerBatch(later, 1, 1))
    assert b.next_plan(later, carry=True) is None  # the caller waits for the last plan
    assert b.next_plan(later) == Plan(0, (TimerBatch(later, 1, 1),), 1, later)


def test_no_carry_fault_plans_without_the_last_plans_batches() -> None:
    b = book(TimerFaults(no_carry=True))
    b.accepted(TimerBatch(T0, 0, 1))
    b.accepted(TimerBatch(T0 + 1, 1, 1))
    plan = b.next_plan(T0)
    assert plan is not None
    b.planned(plan)
    assert b.next_plan(T0 + 1, carry=True) == Plan(1, (TimerBatch(T0 + 1, 1, 1),), 0, T0 + 1)
