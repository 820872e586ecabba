"""Running seeds: one (`run_seed`), or a sweep (`sweep`), with a summary."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from consumers.faults import (
    FAULT_NAMES,
    NO_FAULTS,
    QUEUE_FAULT_NAMES,
    STREAM_FAULT_NAMES,
    CoordinatorFaults,
)
from consumers.sim.checker import Violation
from consumers.sim.queue_world import QUEUE_STAT_NAMES, QueueSimulation
from consumers.sim.world import STAT_NAMES, Simulation

__all__ = [
    "ALL_FAULTS",
    "QUEUE_FAULTS",
    "SHELL_FAULTS",
    "SeedResult",
    "Summary",
    "run_seed",
    "sweep",
]

# Deliberate bugs of the node's side, for the checkers to catch (TEST-ONLY): answering before the
# entries commit, and a member position past what it read.
SHELL_FAULTS = ("reply_before_commit", "skip_ahead")
ALL_FAULTS = STREAM_FAULT_NAMES + SHELL_FAULTS
QUEUE_FAULTS = QUEUE_FAULT_NAMES  # `--queue`: the queue simulation (consumers/sim/queue_world.py)


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    steps: int
    fault: str | None
    stats: dict[str, int]
    digest: str
    violation: str | None = None  # the kind, e.g. "double-owner"
    detail: str | None = None
    at_step: int | None = None
    queue: bool = False

    @property
    def replay(self) -> str:
        command = "python -m consumers.sim" + (" --queue" if self.queue else "")
        command += f" --seed {self.seed} --steps {self.steps}"
        return command + (f" --fault {self.fault}" if self.fault else "")


def run_seed(
    seed: int,
    steps: int,
    fault: str | None = None,
    *,
    twice: bool = False,
    disabled: frozenset[str] = frozenset(),
    queue: bool = False,
) -> SeedResult:
    """One seed; `twice`: run it again and compare the traces (check (e), determinism);
    `queue`: the queue simulation."""
    run = _run_queue if queue else _run_once
    result = run(seed, steps, fault, disabled)
    if twice and result.violation is None and "e" not in disabled:
        again = run(seed, steps, fault, disabled)
        if again.digest != result.digest:
            return replace(
                result,
                violation="nondeterministic",
                detail=f"seed {seed} ran twice gave traces {result.digest} and {again.digest}",
                at_step=steps,
            )
    return result


def _run_once(seed: int, steps: int, fault: str | None, disabled: frozenset[str]) -> SeedResult:
    if fault is not None and fault not in ALL_FAULTS:
        raise ValueError(f"unknown fault {fault!r}; valid: {', '.join(ALL_FAULTS)}")
    faults = CoordinatorFaults.named(fault) if fault in FAULT_NAMES else NO_FAULTS
    shell_fault = fault if fault in SHELL_FAULTS else None
    sim = Simulation(seed, faults=faults, shell_fault=shell_fault, disabled=disabled)
    kind = detail = None
    try:
        sim.run(steps)
    except Violation as violation:
        kind, detail = violation.kind, violation.detail
    except Exception as error:  # a crash of the core or the model is a finding too
        kind = "exception"
        detail = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    sim.finish_stats()
    return SeedResult(
        seed, steps, fault, dict(sim.stats), sim.digest(), kind, detail, sim.now if kind else None
    )


def _run_queue(seed: int, steps: int, fault: str | None, disabled: frozenset[str]) -> SeedResult:
    if fault is not None and fault not in QUEUE_FAULTS:
        raise ValueError(f"unknown queue fault {fault!r}; valid: {', '.join(QUEUE_FAULTS)}")
    faults = CoordinatorFaults.named(fault) if fault is not None else NO_FAULTS
    sim = QueueSimulation(seed, faults=faults)
    kind = detail = None
    try:
        sim.run(steps)
    except Violation as violation:
        kind, detail = violation.kind, violation.detail
    except Exception as error:  # a crash of the core or the model is a finding too
        kind = "exception"
        detail = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    at = sim.now if kind else None
    return SeedResult(seed, steps, fault, dict(sim.stats), sim.digest(), kind, detail, at, True)


@dataclass
class Summary:
    seeds: int = 0
    steps: int = 0
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_NAMES, 0))
    max_liveness_ticks: int = 0
    failures: list[SeedResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    def add(self, result: SeedResult) -> None:
        self.seeds += 1
        self.steps += result.at_step if result.at_step is not None else result.steps
        for name, value in result.stats.items():
            if name == "liveness_ticks":
                self.max_liveness_ticks = max(self.max_liveness_ticks, value)
            else:
                self.stats[name] = self.stats.get(name, 0) + value
        if result.violation is not None:
            self.failures.append(result)

    def lines(self) -> list[str]:
        stats = " ".join(f"{k}={v}" for k, v in self.stats.items() if k != "liveness_ticks")
        return [
            f"seeds={self.seeds} steps={self.steps} violations={len(self.failures)} "
            f"max_liveness_ticks={self.max_liveness_ticks}",
            stats,
            f"elapsed={self.elapsed_s:.1f}s",
        ]


def sweep(
    seeds: Iterable[int],
    steps: int,
    *,
    fault: str | None = None,
    twice: bool = False,
    disabled: frozenset[str] = frozenset(),
    time_limit_s: float | None = None,
    stop_on_failure: bool = False,
    on_result: Callable[[SeedResult], None] | None = None,
    queue: bool = False,
) -> Summary:
    """Runs every seed (or until `time_limit_s`)."""
    summary = Summary(stats=dict.fromkeys(QUEUE_STAT_NAMES if queue else STAT_NAMES, 0))
    started = time.monotonic()
    for seed in seeds:
        result = run_seed(seed, steps, fault, twice=twice, disabled=disabled, queue=queue)
        summary.add(result)
        if on_result is not None:
            on_result(result)
        if stop_on_failure and result.violation is not None:
            break
        if time_limit_s is not None and time.monotonic() - started > time_limit_s:
            break
    summary.elapsed_s = time.monotonic() - started
    return summary
