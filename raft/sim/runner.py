"""Running seeds: one (`run_seed`), or a sweep across processes (`sweep`), with a summary."""

from __future__ import annotations

import logging
import multiprocessing
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from raft.errors import InvariantViolation
from raft.faults import NO_FAULTS, RaftFaults
from raft.sim.checker import Violation
from raft.sim.cluster import STAT_NAMES, Simulation

__all__ = ["SeedResult", "Summary", "nodes_for_seed", "replay_command", "run_seed", "sweep"]


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    nodes: int
    steps: int
    fault: str | None
    stats: dict[str, int]
    disk: str = "memory"
    violation: str | None = None  # the kind, e.g. "election-safety"
    detail: str | None = None
    at_step: int | None = None
    max_leader_wait: int = 0
    max_commit_wait: int = 0

    @property
    def replay(self) -> str:
        return replay_command(self.seed, self.steps, self.nodes, self.fault, self.disk)


def nodes_for_seed(seed: int, choices: tuple[int, ...]) -> int:
    return choices[seed % len(choices)]


def replay_command(
    seed: int, steps: int, nodes: int, fault: str | None, disk: str = "memory"
) -> str:
    command = f"python -m raft.sim --seed {seed} --steps {steps} --nodes {nodes}"
    command += f" --fault {fault}" if fault else ""
    return command + (f" --disk {disk}" if disk != "memory" else "")


def run_seed(
    seed: int, steps: int, nodes: int, fault: str | None = None, disk: str = "memory"
) -> SeedResult:
    faults = RaftFaults.named(fault) if fault else NO_FAULTS
    if disk != "memory":
        # torn tails recovered after simulated crashes are the point of the run, not news
        # (the sim counts them); storage's errors still print
        logging.getLogger("flotilla.storage").setLevel(logging.ERROR)
    sim = Simulation(seed, nodes, faults=faults, disk=disk)
    kind = detail = None
    try:
        sim.run(steps)
    except Violation as violation:
        kind, detail = violation.kind, violation.detail
    except InvariantViolation as error:
        kind, detail = "core-invariant", str(error)
    except Exception as error:  # a crash of the core is a finding too, with its trace
        kind = "exception"
        detail = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    return SeedResult(
        seed,
        nodes,
        steps,
        fault,
        dict(sim.stats),
        disk,
        kind,
        detail,
        sim.now if kind else None,
        sim.max_leader_wait,
        sim.max_commit_wait,
    )


def _run_args(args: tuple[int, int, int, str | None, str]) -> SeedResult:
    return run_seed(*args)


@dataclass
class Summary:
    seeds: int = 0
    steps: int = 0
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_NAMES, 0))
    failures: list[SeedResult] = field(default_factory=list)
    max_leader_wait: int = 0
    max_commit_wait: int = 0
    elapsed_s: float = 0.0

    def add(self, result: SeedResult) -> None:
        self.seeds += 1
        self.steps += result.at_step if result.at_step is not None else result.steps
        for name, value in result.stats.items():
            self.stats[name] = self.stats.get(name, 0) + value
        if result.violation is not None:
            self.failures.append(result)
        self.max_leader_wait = max(self.max_leader_wait, result.max_leader_wait)
        self.max_commit_wait = max(self.max_commit_wait, result.max_commit_wait)

    def lines(self) -> list[str]:
        stats = self.stats
        rate = self.seeds / self.elapsed_s * 60 if self.elapsed_s else 0.0
        return [
            f"seeds={self.seeds} steps={self.steps} elections={stats['elections']} "
            f"commits={stats['commits']} config_changes={stats['config_changes']} "
            f"violations={len(self.failures)}",
            f"proposals={stats['proposals']} transfers={stats['transfers']} "
            f"crashes={stats['crashes']} partitions={stats['partitions']} "
            f"compactions={stats['compactions']} lease_reads={stats['lease_reads']} "
            f"collections={stats['collections']} churns={stats['churns']} "
            f"fail_stops={stats['fail_stops']} io_fail_stops={stats['io_fail_stops']} "
            f"max_leader_wait_ticks={self.max_leader_wait} "
            f"max_commit_wait_ticks={self.max_commit_wait}",
            f"elapsed={self.elapsed_s:.1f}s ({rate:.0f} seeds/min)",
        ]


def sweep(
    seeds: Iterable[int],
    steps: int,
    node_choices: tuple[int, ...],
    *,
    fault: str | None = None,
    disk: str = "memory",
    jobs: int = 1,
    time_limit_s: float | None = None,
    stop_on_failure: bool = False,
    on_result: Callable[[SeedResult], None] | None = None,
) -> Summary:
    """Runs every seed (or until `time_limit_s`), in `jobs` processes."""
    summary = Summary()
    started = time.monotonic()
    work = [(seed, steps, nodes_for_seed(seed, node_choices), fault, disk) for seed in seeds]

    def consume(results: Iterator[SeedResult]) -> None:
        for result in results:
            summary.add(result)
            if on_result is not None:
                on_result(result)
            if stop_on_failure and result.violation is not None:
                return
            if time_limit_s is not None and time.monotonic() - started > time_limit_s:
                return

    if jobs <= 1:
        consume(_run_args(args) for args in work)
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(jobs, initializer=_quiet_storage_log) as pool:
            consume(pool.imap(_run_args, work, chunksize=4))
            pool.terminate()
    summary.elapsed_s = time.monotonic() - started
    return summary


def _quiet_storage_log() -> None:
    """A worker's storage logs each injected disk error before its host fail-stops; the sweep
    counts them (`io_fail_stops`) instead (the parent quiets its own in `raft.sim.__main__`)."""
    logging.getLogger("flotilla.storage").setLevel(logging.CRITICAL)
