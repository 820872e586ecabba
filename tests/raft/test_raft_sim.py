"""The simulator: a seed sweep with zero violations, replay determinism, and — the checker must
be able to fail — every test-only fault reported as a violation with a replayable seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raft.config import RaftConfig
from raft.faults import FAULT_NAMES, RaftFaults
from raft.sim.__main__ import main
from raft.sim.checker import Checker, Violation
from raft.sim.cluster import Simulation
from raft.sim.runner import SeedResult, run_seed, sweep

CI_SEEDS = 300
CI_STEPS = 300


@pytest.mark.timeout(300)
def test_sweep_of_300_seeds_has_no_violation() -> None:
    summary = sweep(range(CI_SEEDS), CI_STEPS, (3, 5))
    failures = [f"{f.violation}: {f.detail} -- {f.replay}" for f in summary.failures]
    assert not failures, "\n".join(failures)
    assert summary.seeds == CI_SEEDS
    stats = summary.stats
    # the run exercised what it claims to
    assert stats["elections"] > CI_SEEDS and stats["commits"] > 10 * CI_SEEDS
    for name in (
        "config_changes",
        "transfers",
        "crashes",
        "partitions",
        "compactions",
        "collections",
        "churns",
    ):
        assert stats[name] > 0, name


def test_a_seed_replays_exactly() -> None:
    first, second = Simulation(11, 5), Simulation(11, 5)
    first.run(800)
    second.run(800)
    assert first.stats == second.stats
    assert first.checker.committed == second.checker.committed
    assert first.network.sent == second.network.sent


# -- the checker must be able to fail ------------------------------------------------------------

EXPECTED = {
    "double_vote": {"election-safety"},
    "vote_ignores_log": {"leader-completeness", "state-machine-safety", "core-invariant"},
    "leader_counts_unsynced": {"commit-not-durable"},
    "ack_before_persist": {"commit-not-durable", "lost-commit"},
    "stale_lease": {"stale-lease-read"},
    "rejoined_votes_blind": {
        "election-safety",
        "leader-completeness",
        "state-machine-safety",
        "lost-commit",
    },
}


def _hunt(fault: str, seeds: range, steps: int, nodes: tuple[int, ...]) -> SeedResult:
    summary = sweep(seeds, steps, nodes, fault=fault, stop_on_failure=True)
    assert summary.failures, (
        f"no seed in {seeds} violated an invariant with --fault {fault}: the checker missed it"
    )
    return summary.failures[0]


# Seeds searched per fault. A stale lease shows only when a new leader commits inside the old
# one's last election timeout: about 1 seed in 70 of the random schedule (5-6 in 400).
HUNT_SEEDS = {"stale_lease": 400}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_each_fault_is_caught_with_a_replayable_seed(fault: str) -> None:
    found = _hunt(fault, range(HUNT_SEEDS.get(fault, 60)), 1500, (3, 5))
    assert found.violation in EXPECTED[fault], f"{found.violation}: {found.detail}"
    assert f"--seed {found.seed} " in found.replay and f"--fault {fault}" in found.replay
    again = run_seed(found.seed, found.steps, found.nodes, fault)
    assert (again.violation, again.detail, again.at_step) == (
        found.violation,
        found.detail,
        found.at_step,
    )
    clean = run_seed(found.seed, found.steps, found.nodes)
    assert clean.violation is None, f"{clean.violation}: {clean.detail}"


# A seed on which the random simulator, unaided, found the Figure 8 bug. If a change to the core
# or the simulator moves the trajectory, find a new one with
#   python -m raft.sim --seeds 3000 --steps 3000 --nodes 3 --fault commit_previous_term \
#       --stop-on-failure
# (last recorded: 671 seeds, after a follower that refuses a vote keeps its election timer;
# 773 after the membership-churn nemesis and the leader's forget_lost;
# 1,554 after replica GC made removed nodes run on in the simulator; 882 after the lazy commit
# updates of leader.py, 170 before them; 992 after a first campaign at term 0 skipped the
# pre-vote) and update it here.
FIGURE_8_SEED = 991


def test_committing_a_previous_term_entry_is_caught_by_the_random_simulator() -> None:
    result = run_seed(FIGURE_8_SEED, 3000, 3, "commit_previous_term")
    assert result.violation in {"leader-completeness", "state-machine-safety", "core-invariant"}, (
        f"seed {FIGURE_8_SEED} no longer finds commit_previous_term; see the comment above"
    )
    assert run_seed(FIGURE_8_SEED, 3000, 3).violation is None


# Seeds of the CI sweep (300 steps) on which the membership-churn nemesis (raft.sim.churn) found
# the split brain of issue 21 on the code before the vote floor (the same seeds as with the fault
# that restores the old vote granting). If a change moves the trajectory, find new ones with
#   python -m raft.sim --seeds 300 --steps 300 --fault rejoined_votes_blind
# (18, 28, 92, 116, 292 before a follower that refuses a vote kept its election timer).
REJOIN_SEEDS = (18, 28, 240)


def test_the_churn_nemesis_finds_a_re_added_replica_voting_blind() -> None:
    summary = sweep(REJOIN_SEEDS, CI_STEPS, (3, 5), fault="rejoined_votes_blind")
    found = {f.seed: f.violation for f in summary.failures}
    assert set(found) == set(REJOIN_SEEDS), (
        f"--fault rejoined_votes_blind: violations on {found} of seeds {REJOIN_SEEDS}; "
        "see the comment above"
    )
    assert set(found.values()) <= EXPECTED["rejoined_votes_blind"], found
    clean = sweep(REJOIN_SEEDS, CI_STEPS, (3, 5))
    assert not clean.failures and clean.stats["churns"] > 0


def test_faults_are_only_reachable_explicitly() -> None:
    import raft

    assert "RaftFaults" not in getattr(raft, "__all__", ())
    assert not any("fault" in name for name in RaftConfig.__dataclass_fields__)
    assert not RaftFaults().any
    with pytest.raises(ValueError, match="unknown fault"):
        RaftFaults.named("nonsense")
    assert set(EXPECTED) | {"commit_previous_term"} == set(FAULT_NAMES)


def test_leader_completeness_concerns_only_earlier_terms() -> None:
    """Found by the soak (seed 245): a candidate of term 149 whose vote grants arrive late may
    win after term 150 committed an entry; it is no violation that it lacks that entry. A leader
    of a later term lacking it is."""
    from raft.log import MemoryLog
    from raft.log_view import LogView
    from raft.types import Entry, EntryKind

    checker = Checker()
    newer = Entry(2, 150, EntryKind.NOOP, 0, b"")
    checker.on_commit("n5", [newer], decided_in_term=150)
    old_log = MemoryLog()
    old_log.append([Entry(1, 140, EntryKind.NOOP, 0, b""), Entry(2, 149, EntryKind.NOOP, 0, b"")])
    checker.on_leader("n2", 149, LogView(old_log), applied=0)  # no violation
    with pytest.raises(Violation, match="leader-completeness"):
        checker.on_leader("n2", 151, LogView(old_log), applied=0)


def test_violation_names_its_kind() -> None:
    violation = Violation("election-safety", "term 3 has two leaders")
    assert str(violation) == "election-safety: term 3 has two leaders"


# -- the command line -------------------------------------------------------------------------------


def test_cli_summary_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "4", "--steps", "120"]) == 0
    out = capsys.readouterr().out
    assert "seeds=4 steps=" in out and "violations=0" in out and "config_changes=" in out
    assert main(["--seeds", "30", "--steps", "600", "--fault", "double_vote"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION seed=" in out
    assert "python -m raft.sim --seed " in out and "--fault double_vote" in out


def test_cli_replays_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3", "--steps", "200", "--nodes", "5"]) == 0
    assert "no violation" in capsys.readouterr().out


def test_cli_runs_as_a_module_with_jobs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raft.sim", "--seeds", "6", "--steps", "100", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "seeds=6" in done.stdout
