"""`python -m timers.sim`: sweep seeds through the timer simulator, or replay one.

    python -m timers.sim --seeds 200                    # seeds 0..199
    python -m timers.sim --seed 42                      # replay one seed (run twice: determinism)
    python -m timers.sim --seeds 50 --fault fire_twice  # a checker must fail

Prints a summary; exits 1 if any seed violated a promise, after printing each failing seed with
the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import sys

from timers.faults import FAULT_NAMES
from timers.sim.runner import DEFAULT_STEPS, SeedResult, run_seed, sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timers.sim", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of a sweep")
    parser.add_argument("--seed", type=int, help="replay this one seed, with its statistics")
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"faulty steps per seed (default {DEFAULT_STEPS})",
    )
    parser.add_argument("--time-limit", type=float, help="stop starting seeds after this many s")
    parser.add_argument("--fault", choices=FAULT_NAMES, help="TEST ONLY: inject a bug")
    parser.add_argument("--twice", action="store_true", help="run every seed twice (determinism)")
    parser.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1:
        parser.error("--seeds and --steps must be >= 1")

    if args.seed is not None:
        result = run_seed(args.seed, args.steps, args.fault, twice=True)
        print(f"seed={result.seed} steps={result.steps} digest={result.digest}")
        print(" ".join(f"{k}={v}" for k, v in result.stats.items()))
        if result.violation is not None:
            _report(result)
            return 1
        print("no violation")
        return 0

    summary = sweep(
        range(args.first_seed, args.first_seed + args.seeds),
        args.steps,
        fault=args.fault,
        twice=args.twice,
        time_limit_s=args.time_limit,
        stop_on_failure=args.stop_on_failure,
        on_result=lambda r: _report(r) if r.violation is not None else None,
    )
    for line in summary.lines():
        print(line)
    if summary.failures:
        print(f"FAILED: {len(summary.failures)} seed(s) violated a promise; replay with:")
        for failure in summary.failures[:20]:
            print(f"  {failure.replay}")
        return 1
    return 0


def _report(result: SeedResult) -> None:
    print(
        f"VIOLATION seed={result.seed} step={result.at_step} {result.violation}: {result.detail}",
        flush=True,
    )
    print(f"  replay: {result.replay}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
