"""Running seeds of the timer simulation: one (`run_seed`), or a sweep (`sweep`)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from timers.faults import NO_FAULTS, TimerFaults
from timers.sim.checker import Violation
from timers.sim.world import STAT_NAMES, TimerSimulation

__all__ = ["DEFAULT_STEPS", "SeedResult", "Summary", "run_seed", "sweep"]

DEFAULT_STEPS = 300
_MAXIMA = ("max_loaded", "max_lateness_ms", "max_retained")


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    steps: int
    fault: str | None
    stats: dict[str, int]
    digest: str
    violation: str | None = None
    detail: str | None = None
    at_step: int | None = None

    @property
    def replay(self) -> str:
        command = f"python -m timers.sim --seed {self.seed} --steps {self.steps}"
        return command + (f" --fault {self.fault}" if self.fault else "")


def run_seed(
    seed: int, steps: int = DEFAULT_STEPS, fault: str | None = None, *, twice: bool = False
) -> SeedResult:
    """One seed; `twice`: run it again and compare the traces (determinism)."""
    result = _run_once(seed, steps, fault)
    if twice and result.violation is None:
        again = _run_once(seed, steps, fault)
        if again.digest != result.digest:
            return replace(
                result,
                violation="nondeterministic",
                detail=f"seed {seed} ran twice gave traces {result.digest} and {again.digest}",
            )
    return result


def _run_once(seed: int, steps: int, fault: str | None) -> SeedResult:
    faults = TimerFaults.named(fault) if fault is not None else NO_FAULTS
    sim = TimerSimulation(seed, faults=faults)
    kind = detail = None
    try:
        sim.run(steps)
    except Violation as violation:
        kind, detail = violation.kind, violation.detail
    except Exception as error:  # a crash of the core or the model is a finding too
        kind = "exception"
        detail = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
    at = sim.step_count if kind else None
    return SeedResult(seed, steps, fault, dict(sim.stats), sim.digest(), kind, detail, at)


@dataclass
class Summary:
    seeds: int = 0
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_NAMES, 0))
    failures: list[SeedResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    def add(self, result: SeedResult) -> None:
        self.seeds += 1
        for name, value in result.stats.items():
            if name in _MAXIMA:
                self.stats[name] = max(self.stats[name], value)
            else:
                self.stats[name] += value
        if result.violation is not None:
            self.failures.append(result)

    def lines(self) -> list[str]:
        return [
            f"seeds={self.seeds} violations={len(self.failures)} elapsed={self.elapsed_s:.1f}s",
            " ".join(f"{k}={v}" for k, v in self.stats.items()),
        ]


def sweep(
    seeds: Iterable[int],
    steps: int = DEFAULT_STEPS,
    *,
    fault: str | None = None,
    twice: bool = False,
    time_limit_s: float | None = None,
    stop_on_failure: bool = False,
    on_result: Callable[[SeedResult], None] | None = None,
) -> Summary:
    """Runs every seed (or until `time_limit_s`)."""
    summary = Summary()
    started = time.monotonic()
    for seed in seeds:
        result = run_seed(seed, steps, fault, twice=twice)
        summary.add(result)
        if on_result is not None:
            on_result(result)
        if stop_on_failure and result.violation is not None:
            break
        if time_limit_s is not None and time.monotonic() - started > time_limit_s:
            break
    summary.elapsed_s = time.monotonic() - started
    return summary
