"""The queue simulator (`python -m consumers.sim --queue`): a seed sweep with no violation that
exercised every fault (failovers, crashes between a dead-letter copy and its confirmation,
crashed and departing receivers, late settles), replay determinism, each deliberately broken
coordinator caught by the violation meant for it, and each check of the checker failing on a
deliberately broken history."""

from __future__ import annotations

import time

import pytest

from consumers.entries import MemberRemoved, QueueDeadLettered, QueueLeased, QueueSettled
from consumers.faults import QUEUE_FAULT_NAMES
from consumers.queue_types import REASON_MAX_DELIVERIES, REASON_REJECTED, DeadLetterJob
from consumers.sim.__main__ import main
from consumers.sim.checker import Violation
from consumers.sim.queue_checker import QueueChecker
from consumers.sim.queue_world import QueueSimulation
from consumers.sim.runner import run_seed, sweep

SEEDS, STEPS = 40, 400  # 200 ticks of faults and production, then a 200-tick drain


def test_a_sweep_has_no_violation_and_exercises_every_fault() -> None:
    started = time.monotonic()
    summary = sweep(range(SEEDS), STEPS, queue=True)
    failures = [f"{f.violation}: {f.detail} -- {f.replay}" for f in summary.failures]
    assert not failures, "\n".join(failures)
    print(*summary.lines(), f"wall={time.monotonic() - started:.1f}s", sep="\n")
    stats = summary.stats
    for name in (
        "acks",
        "releases",
        "rejects",
        "extends",
        "expiries",
        "lost_settlements",
        "dead_letter_copies",
        "dead_letter_duplicates",  # a copy repeated after a crash lands once
        "crashes_between_copy_and_confirm",
        "failovers",
        "lost_batches",
        "leaves",
        "crashes",
        "retention_steps",
        "dead_letters_gone",  # a placeholder at its sequence, settled as deleted
        "key_skips",  # key ordering held a record back
    ):
        assert stats[name] > 0, name
    assert stats["records"] > 300 * SEEDS
    assert stats["acks"] + stats["dead_letter_copies"] >= 0.9 * stats["records"]


def test_a_seed_replays_exactly_and_seeds_differ() -> None:
    first, second, other = QueueSimulation(5), QueueSimulation(5), QueueSimulation(6)
    for sim in (first, second, other):
        sim.run(STEPS)
    assert first.digest() == second.digest() and first.stats == second.stats
    assert first.digest() != other.digest()
    assert run_seed(5, STEPS, twice=True, queue=True).violation is None


# fault -> the violations that may report it
EXPECTED = {
    # a new coordinator hands out a leased record again: as a second lease before the first's
    # deadline, a count that does not grow, or the first holder's settle lost
    "forget_lease_on_load": {"leased-twice", "delivery-count", "lease-lost-early"},
    "redeliver_before_deadline": {"expired-before-deadline"},
    "dead_letter_twice": {"dead-lettered-twice"},
    "reset_count_on_release": {"delivery-count"},
}


def test_every_queue_fault_has_an_expectation() -> None:
    assert set(EXPECTED) == set(QUEUE_FAULT_NAMES)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_broken_coordinator_is_caught(fault: str) -> None:
    summary = sweep(range(50), STEPS, fault=fault, stop_on_failure=True, queue=True)
    assert summary.failures, f"no seed of 0..49 caught --fault {fault}"
    failure = summary.failures[0]
    assert failure.violation in EXPECTED[fault], f"{failure.violation}: {failure.detail}"
    assert failure.replay.endswith(f"--queue --seed {failure.seed} --steps {STEPS} --fault {fault}")
    again = run_seed(failure.seed, STEPS, fault, twice=True, queue=True)
    assert (again.violation, again.at_step) == (failure.violation, failure.at_step)


# -- each check fails on a deliberately broken history ---------------------------------------------

T = 1_000_000


def leased(
    offset: int, count: int = 1, member: str = "m1", deadline: int = T + 5_000
) -> QueueLeased:
    return QueueLeased("g", "t", "u", 0, 0, member, deadline, offset + 1, ((offset, count, None),))


def job(
    offset: int, sequence: int, count: int = 3, reason: str = REASON_MAX_DELIVERIES
) -> DeadLetterJob:
    return DeadLetterJob("g", "t", "u", 0, offset, count, reason, "t.g.dlq", 7, sequence)


def checker() -> QueueChecker:
    c = QueueChecker(max_deliveries=3)
    for offset in range(4):
        c.produced((0, offset), b"k" if offset < 2 else None)
    return c


def test_the_checker_catches_a_second_ack() -> None:
    c = checker()
    c.committed([leased(2)], T, False)
    c.committed([QueueSettled("g", "t", "u", 0, acked=(2,))], T, False)
    with pytest.raises(Violation, match="acked-twice"):
        c.committed([QueueSettled("g", "t", "u", 0, acked=(2,))], T + 1, False)


def test_the_checker_catches_an_ack_and_a_dead_letter_of_one_record() -> None:
    c = checker()
    c.committed([leased(2), QueueSettled("g", "t", "u", 0, acked=(2,))], T, False)
    with pytest.raises(Violation, match="acked-and-dead-lettered"):
        c.copy(job(2, 0), 0)


def test_the_checker_catches_a_record_neither_acked_nor_dead_lettered() -> None:
    c = checker()
    c.committed([leased(2), QueueSettled("g", "t", "u", 0, acked=(2,))], T, False)
    assert c.copy(job(3, 0), 0)
    c.drained([(0, 2), (0, 3)])
    with pytest.raises(Violation, match=r"lost-record.*\(0, 1\)"):
        c.drained([(0, 1), (0, 2), (0, 3)])


def test_the_checker_catches_a_second_live_lease_and_a_count_that_does_not_grow() -> None:
    c = checker()
    c.committed([leased(3)], T, False)
    with pytest.raises(Violation, match="leased-twice"):
        c.committed([leased(3, 2, "m2")], T + 4_999, False)
    c = checker()
    c.committed([leased(3)], T, False)
    with pytest.raises(Violation, match="delivery-count"):
        c.committed([leased(3, 1, "m2")], T + 5_000, False)
    c.committed([leased(2, 1)], T, False)


def test_the_checker_catches_an_expiry_before_the_deadline_but_not_a_departure() -> None:
    c = checker()
    c.committed([leased(3)], T, False)
    back = QueueSettled("g", "t", "u", 0, waiting=((3, T + 6_000, 1),))
    with pytest.raises(Violation, match="expired-before-deadline"):
        c.committed([back], T + 4_000, True)
    c = checker()
    c.committed([leased(3)], T, False)
    c.committed([back, MemberRemoved("g", "m1")], T + 4_000, True)  # its session ended


def test_the_checker_catches_a_key_handed_out_before_its_earlier_record_settled() -> None:
    c = checker()
    c.committed([leased(0)], T, False)
    with pytest.raises(Violation, match="key-order"):
        c.committed([leased(1)], T, False)
    c = checker()
    c.committed([leased(0), QueueSettled("g", "t", "u", 0, acked=(0,))], T, False)
    c.committed([leased(1)], T, False)


def test_the_checker_catches_dead_letter_copies_out_of_rule() -> None:
    c = checker()
    with pytest.raises(Violation, match="dead-letter-early"):
        c.copy(job(1, 0, count=2), 0)
    c = checker()
    assert c.copy(job(1, 0, count=1, reason=REASON_REJECTED), 0)
    assert not c.copy(job(1, 0, count=1, reason=REASON_REJECTED), 0)  # the dedupe drops it
    with pytest.raises(Violation, match="dead-letter-sequence-gap"):
        c.copy(job(2, 2), 0)
    with pytest.raises(Violation, match="dead-lettered-twice"):
        c.copy(job(1, 1), 0)
    c.committed([QueueDeadLettered("g", "t", "u", 0, (1,))], T, False)


def test_the_checker_catches_late_settles_lost_leases_and_a_full_window() -> None:
    with pytest.raises(Violation, match="late-settle-applied"):
        QueueChecker.settle_applied("m1", (0, 1), T, T)
    QueueChecker.settle_applied("m1", (0, 1), T, T - 1)
    c = checker()
    with pytest.raises(Violation, match="lease-lost-early"):
        c.settle_lost("m1", (0, 1), T, T - 1)
    c.settle_lost("m1", (0, 1), T, T)
    with pytest.raises(Violation, match="window"):
        c.window(0, 10, 15, 4)
    c.window(0, 10, 14, 4)
    c.retention(0, 20)  # retention moved next to the log start; a lease holds the floor
    c.window(0, 10, 20, 4)
    with pytest.raises(Violation, match="window"):
        c.window(0, 10, 21, 4)


def test_the_cli_runs_queue_seeds_and_fails_with_a_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--queue", "--seeds", "3"]) == 0
    assert "violations=0" in capsys.readouterr().out
    assert (
        main(["--queue", "--seeds", "20", "--fault", "dead_letter_twice", "--stop-on-failure"]) == 1
    )
    out = capsys.readouterr().out
    assert "dead-lettered-twice" in out and "--queue --seed" in out
    assert main(["--queue", "--seed", "2"]) == 0
    with pytest.raises(SystemExit):
        main(["--queue", "--fault", "never_expire"])
