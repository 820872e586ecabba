"""The timer simulator (`python -m timers.sim`): a seed sweep with no violation that exercised
every fault (failovers, lost tails, crashes between plan and fire, index crashes, producer
retries, a source that forgot the fire producer or answers a plan fired again as behind, a
firing pipeline failing part-way, roll-forward rounds and crashes between a
roll's copies and its floor), the same run over the real on-disk index on a
simulated disk that loses and tears unflushed writes, replay determinism, each deliberately
broken book caught by the violation meant for it, and each check of the checker failing on a
deliberately broken history."""

from __future__ import annotations

import random
import time

import pytest

from storage.simdisk import SimDisk
from storage.timer_files import ENTRY_SIZE
from storage.timer_index import TimerIndex
from timers.faults import FAULT_NAMES, TimerFaults
from timers.sim.__main__ import main
from timers.sim.checker import TimerChecker, Violation
from timers.sim.runner import run_seed, sweep
from timers.sim.world import LATE_BOUND_MS, SIM_CONFIG, TimerSimulation
from timers.types import Plan, TimerBatch

SEEDS, STEPS = 60, 300


def test_a_sweep_has_no_violation_and_exercises_every_fault() -> None:
    started = time.monotonic()
    summary = sweep(range(SEEDS), STEPS)
    failures = [f"{f.violation}: {f.detail} -- {f.replay}" for f in summary.failures]
    assert not failures, "\n".join(failures)
    print(*summary.lines(), f"wall={time.monotonic() - started:.1f}s", sep="\n")
    stats = summary.stats
    for name in (
        "past_timers",
        "far_timers",
        "bursts",
        "duplicates",  # a repeat after a failover answered as a duplicate by the source
        "fire_epochs",  # a plan after a long gap: a new fire producer, at sequence 0
        "behind_answers",  # a plan fired again past the batches the source remembers
        "pipeline_failures",  # a plan's pipeline failed part-way: sent again one by one
        "in_flight_answers",  # ... on a deadline, a batch still proposed: its resend in flight
        "crashes_after_fire",  # a long plan fired in full, then a crash before its marker
        "done_markers",
        "carried_plans",  # a plan made while the last one was still being fired
        "failovers",
        "tails_lost",  # uncommitted records (plans among them) lost with a leader
        "crashes_mid_fire",
        "index_crashes",
        "producer_retries",
        "refused_at_acceptance",
        "bucket_loads",
        "slow_reads",
        "failed_reads",
        "roll_rounds",
        "rolls",  # pending timers rolled forward (copies committed)
        "floors",
        "rolls_lost",  # copies lost with a leader's uncommitted tail
        "crashes_mid_roll",  # copies committed, the floor record lost with the leader
        "cut_records",  # the log cut below what no index needs any more
        "index_rebuilds",  # a follower's index lost, a new one folded from the cut log
        "remarks",  # the done marker appended again: the log goes past the last plan's record
    ):
        assert stats[name] > 0, name
    assert stats["landed"] > 100 * SEEDS
    # the source never forgets the fire producer of a plan, so nothing fired is rebased
    assert stats["rebases"] == stats["rebases_after_forget"] == 0
    assert 0 < stats["max_lateness_ms"] <= LATE_BOUND_MS


def test_a_seed_replays_exactly_and_seeds_differ() -> None:
    first, second, other = TimerSimulation(5), TimerSimulation(5), TimerSimulation(6)
    for sim in (first, second, other):
        sim.run(STEPS)
    assert first.digest() == second.digest() and first.stats == second.stats
    assert first.digest() != other.digest()
    assert run_seed(5, STEPS, twice=True).violation is None


class SimDiskStore:
    """One replica's index directory on a disk of its own that loses or tears what was not
    flushed when it crashes (storage.simdisk)."""

    def __init__(self, seed: int) -> None:
        self.disk = SimDisk(random.Random(seed))
        self.opened = 0

    def open(self, start_offset: int = 0) -> TimerIndex:
        self.opened += 1
        # a small journal: its moves into bucket files happen often, crashes among them
        return TimerIndex.open(
            "/node/timers/p0",
            SIM_CONFIG.bucket_ms,
            disk=self.disk,
            journal_max_bytes=ENTRY_SIZE * 24,
            start_offset=start_offset,
        )

    def crash(self) -> None:
        self.disk.crash()


@pytest.mark.parametrize("seed", range(8))
def test_the_simulation_over_the_real_index_on_a_crashing_disk(seed: int) -> None:
    stores: list[SimDiskStore] = []

    def make(number: int) -> SimDiskStore:
        stores.append(SimDiskStore(seed * 10 + number))
        return stores[-1]

    sim = TimerSimulation(seed, stores=make)
    sim.run(STEPS)  # raises Violation on a broken promise
    assert sim.stats["index_crashes"] > 0 and sim.stats["landed"] > 20
    assert sum(s.opened for s in stores) == len(stores) + sim.stats["index_crashes"]
    assert len(stores) == 3 + sim.stats["index_rebuilds"]


# fault -> the violations that may report it
EXPECTED = {
    "fire_twice": {"fired-twice", "pending"},
    "fire_early": {"planned-early", "fired-early"},
    "forget_last_plan": {"lost"},
    "skip_far_bucket": {"lost"},
    "no_done_marker": {"fired-twice"},
    "roll_keeps_original": {"both-live"},
    "rebase_behind": {"fired-twice"},
    "rebase_in_flight": {"fired-twice"},
    "no_carry": {"lost"},
    "refire_own_only": {"lost"},
}


def test_every_fault_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FAULT_NAMES)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_broken_book_is_caught(fault: str) -> None:
    summary = sweep(range(120), STEPS, fault=fault, stop_on_failure=True)
    assert summary.failures, f"no seed of 0..119 caught --fault {fault}"
    failure = summary.failures[0]
    assert failure.violation in EXPECTED[fault], f"{failure.violation}: {failure.detail}"
    assert (
        failure.replay
        == f"python -m timers.sim --seed {failure.seed} --steps {STEPS} --fault {fault}"
    )
    again = run_seed(failure.seed, STEPS, fault, twice=True)
    assert (again.violation, again.at_step) == (failure.violation, failure.at_step)


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "no violation" in capsys.readouterr().out
    assert main(["--seed", "0", "--fault", "fire_early"]) == 1
    assert "replay: python -m timers.sim --seed 0 --steps 300 --fault fire_early" in (
        capsys.readouterr().out
    )
    assert main(["--seeds", "2"]) == 0


# -- each check fails on a deliberately broken history ---------------------------------------------

T = 1_000_000_000


def checker() -> TimerChecker:
    c = TimerChecker(SIM_CONFIG, late_bound_ms=1_000)
    for offset, due in enumerate([T, T + 10, T + 20]):
        c.committed_batch(TimerBatch(due, offset, 1), producer=1, sequence=offset, now_ms=T - 5)
    return c


PLAN = Plan(0, (TimerBatch(T, 0, 1), TimerBatch(T + 10, 1, 1), TimerBatch(T + 20, 2, 1)))


def test_the_checker_passes_a_good_history() -> None:
    c = checker()
    c.plan_made(PLAN, T + 20)
    c.committed_plan(PLAN)
    for index in range(3):
        c.landed_batch(PLAN, index, T + 20, ready_at_ms=T - 100)
    c.counts("book", 0)
    c.memory(0, T + 20)
    c.finish()


def test_the_checker_catches_a_batch_accepted_twice() -> None:
    c = checker()
    with pytest.raises(Violation, match="accepted-twice"):
        c.committed_batch(TimerBatch(T, 9, 1), producer=1, sequence=2)


def test_the_checker_catches_a_second_landing() -> None:
    c = checker()
    c.landed_batch(PLAN, 0, T, T)
    with pytest.raises(Violation, match="fired-twice"):
        c.landed_batch(Plan(5, PLAN.batches[:1]), 0, T + 1, T)


def test_the_checker_catches_a_lost_timer() -> None:
    c = checker()
    c.landed_batch(PLAN, 0, T, T)
    with pytest.raises(Violation, match="lost: 2 accepted batch"):
        c.finish()


def test_the_checker_catches_early_plans_and_landings() -> None:
    c = checker()
    with pytest.raises(Violation, match="planned-early"):
        c.plan_made(PLAN, T + 19)
    with pytest.raises(Violation, match="fired-early"):
        c.landed_batch(PLAN, 2, T + 19, T)


def test_the_checker_catches_disorder() -> None:
    c = checker()
    with pytest.raises(Violation, match="out-of-order"):
        c.plan_made(Plan(0, (PLAN.batches[1], PLAN.batches[0])), T + 20)
    c.landed_batch(PLAN, 1, T + 20, T)
    with pytest.raises(Violation, match="out-of-order"):
        c.landed_batch(PLAN, 0, T + 20, T)


def test_the_checker_catches_a_late_landing_but_allows_for_an_election() -> None:
    c = checker()
    c.landed_batch(PLAN, 0, T + 5_000, ready_at_ms=T + 4_500)  # 500 ms after the new leader
    with pytest.raises(Violation, match="late: offset 1"):
        c.landed_batch(PLAN, 1, T + 1_011, ready_at_ms=T)


def test_the_checker_catches_wrong_counts_and_a_book_beyond_its_window() -> None:
    c = checker()
    with pytest.raises(Violation, match="pending: book counts 2 pending records, 3 are"):
        c.counts("book", 2)
    far = TimerBatch(T + 100 * SIM_CONFIG.bucket_ms, 3, 1)
    c.committed_batch(far, producer=1, sequence=3)
    c.memory(3, T)
    with pytest.raises(Violation, match="memory: the book holds 4 batches"):
        c.memory(4, T)


def test_the_checker_catches_an_index_that_lets_needed_log_go() -> None:
    c = checker()
    c.retention("index", 0, applied_offset=2, last_plan=None)
    c.committed_plan(PLAN)  # every timer fired: only the replay from applied offset 2 remains
    c.retention("index", 2, applied_offset=2, last_plan=None)
    with pytest.raises(Violation, match="retention: index lets the timer log go below offset 3"):
        c.retention("index", 3, applied_offset=2, last_plan=None)
    with pytest.raises(Violation, match="offset 1 is still needed"):
        c.retention("index", 2, applied_offset=5, last_plan=Plan(0, (PLAN.batches[1],)))


def test_a_book_holding_everything_fails_the_memory_check() -> None:
    """A book with a window as wide as the run (every timer in memory) is caught."""
    wide = TimerSimulation(2)
    wide.config = SIM_CONFIG.__class__(
        SIM_CONFIG.bucket_ms, 1_000, SIM_CONFIG.max_plan_records, SIM_CONFIG.max_plan_batches
    )
    with pytest.raises(Violation, match="memory"):
        wide.run(STEPS)


def test_faults_are_named() -> None:
    assert TimerFaults.named("no_done_marker").no_done_marker
    with pytest.raises(ValueError, match="unknown timer fault 'x'"):
        TimerFaults.named("x")


def test_a_fire_producer_the_source_forgot_starts_afresh_instead_of_being_rebased() -> None:
    """Quiet stretches (no timer firing for longer than the source remembers an idle producer)
    happen in these seeds: the plan after one fires under a new fire-producer epoch at
    sequence 0, so the source never answers a fired batch as from a producer it does not know
    (each such answer cost a rebase: two round trips, one more producer in the source's
    table, for every batch fired after the gap, for ever)."""
    summary = sweep(range(8), STEPS)
    assert not summary.failures, [f.detail for f in summary.failures]
    stats = summary.stats
    assert stats["quiet_stretches"] > 0  # the gaps happened
    assert stats["rebases_after_forget"] == 0, stats
    assert stats["fire_epochs"] > 0  # the fire producer started afresh after them
