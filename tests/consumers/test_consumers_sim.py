"""The consumer-group simulator: a seed sweep with no violation that exercised every fault, replay
determinism, and — the checkers must be able to fail — every deliberately broken coordinator (or
node) caught, each by the checker meant for it, with a replayable seed.

The bigger soak is `make soak` (`python -m consumers.sim --seeds 2000 --steps 600 --twice`)."""

from __future__ import annotations

import time

import pytest

from consumers.faults import STREAM_FAULT_NAMES
from consumers.sim.__main__ import main
from consumers.sim.checker import CHECKS
from consumers.sim.runner import ALL_FAULTS, SeedResult, run_seed, sweep
from consumers.sim.world import Simulation

CI_SEEDS = 200
CI_STEPS = 300  # 150 ticks of faults, then the 150-tick quiet phase that judges liveness


def test_a_sweep_of_200_seeds_has_no_violation_and_exercises_every_fault() -> None:
    started = time.monotonic()
    summary = sweep(range(CI_SEEDS), CI_STEPS)
    failures = [f"{f.violation}: {f.detail} -- {f.replay}" for f in summary.failures]
    assert not failures, "\n".join(failures)
    assert summary.seeds == CI_SEEDS
    stats = summary.stats
    print(*summary.lines(), f"wall={time.monotonic() - started:.1f}s", sep="\n")
    # the run did what it claims: every kind of fault happened, and the coordinator fenced
    for name in (
        "joins",
        "leaves",
        "static_leaves",
        "crashes",
        "pauses",
        "failovers",
        "lost_batches",
        "lost_messages",
        "partitions_added",
        "zombie_commits_sent",
        "commits_fenced",
        "self_fenced",
    ):
        assert stats[name] > 0, name
    assert stats["commits_accepted"] > 20 * CI_SEEDS
    assert stats["records_processed"] > 500 * CI_SEEDS
    assert 0 < summary.max_liveness_ticks <= 100


def test_a_seed_replays_exactly_and_seeds_differ() -> None:
    first, second, other = Simulation(7), Simulation(7), Simulation(8)
    for sim in (first, second, other):
        sim.run(CI_STEPS)
    assert first.digest() == second.digest()
    assert first.stats == second.stats
    assert first.digest() != other.digest()
    assert run_seed(7, CI_STEPS, twice=True).violation is None


# -- the checkers must be able to fail ------------------------------------------------------------

# fault -> the violations that may report it, with every check on
EXPECTED = {
    "grant_before_revoke": {"double-owner"},  # (a)
    "accept_zombie_commit": {"zombie-commit"},  # (c)
    "commit_ignores_assignment": {"commit-not-owned"},  # (c)
    "load_keeps_first_offset": {"offset-read-back"},  # (b)
    "reply_before_commit": {"ack-before-commit"},  # (b)
    "never_expire": {"liveness"},  # (d)
    "unseeded_member_ids": {"nondeterministic"},  # (e)
    "skip_ahead": {"skipped-records"},  # (f)
}


# Seeds searched per fault (default 100). A commit for a partition the member no longer owns
# reaches the coordinator only when a revocation's commit is overtaken by the heartbeat that
# reports the partition gone, or a zombie's session was restarted by a failover: the first seed
# that shows it at 300 steps is 108.
HUNT_SEEDS = {"commit_ignores_assignment": 200}


def _hunt(fault: str, disabled: frozenset[str] = frozenset(), seeds: int = 100) -> SeedResult:
    twice = fault == "unseeded_member_ids"  # a second run only where determinism is the point
    summary = sweep(
        range(seeds), CI_STEPS, fault=fault, twice=twice, disabled=disabled, stop_on_failure=True
    )
    assert summary.failures, (
        f"no seed in 0..{seeds - 1} violated a promise with --fault {fault} "
        f"(checks off: {sorted(disabled)}): the checker missed it"
    )
    return summary.failures[0]


def test_every_fault_has_an_expectation() -> None:
    assert set(EXPECTED) == set(ALL_FAULTS) and set(STREAM_FAULT_NAMES) <= set(EXPECTED)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_broken_coordinator_is_caught_by_its_checker(fault: str) -> None:
    failure = _hunt(fault, seeds=HUNT_SEEDS.get(fault, 100))
    assert failure.violation in EXPECTED[fault], f"{failure.violation}: {failure.detail}"
    assert failure.replay.endswith(f"--fault {fault}")
    # the replay command reproduces it
    again = run_seed(failure.seed, failure.steps, fault, twice=True)
    assert (again.violation, again.at_step) == (failure.violation, failure.at_step)


@pytest.mark.parametrize(
    ("fault", "only", "expected"),
    [
        ("accept_zombie_commit", "b", "offset-regressed"),
        ("grant_before_revoke", "b", "offset-regressed"),
        ("load_keeps_first_offset", "f", "start-not-at-commit"),
    ],
)
def test_checkers_on_their_own_still_catch(fault: str, only: str, expected: str) -> None:
    """(b) alone: a zombie's accepted commit, or two owners committing, moves a committed offset
    backwards. (f) alone: a coordinator that forgets offsets when it loads the log hands a new
    owner an offset below the partition's last commit (more duplicates than promised)."""
    failure = _hunt(fault, CHECKS - {only})
    assert failure.violation == expected, f"{failure.violation}: {failure.detail}"


def test_the_cli_prints_a_summary_and_fails_with_a_replay_on_a_violation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--seeds", "3", "--steps", "200"]) == 0
    assert "violations=0" in capsys.readouterr().out
    assert main(["--seeds", "20", "--fault", "skip_ahead", "--stop-on-failure"]) == 1
    out = capsys.readouterr().out
    assert "skipped-records" in out and "--fault skip_ahead" in out
    assert main(["--seed", "3", "--steps", "200"]) == 0
