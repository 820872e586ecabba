"""`python -m consumers.sim`: sweep seeds through the consumer-group simulator, or replay one.

    python -m consumers.sim --seeds 1000                       # seeds 0..999
    python -m consumers.sim --seed 42 --steps 600              # replay one seed, with its stats
    python -m consumers.sim --seeds 300 --fault grant_before_revoke   # a checker must fail
    python -m consumers.sim --seeds 50 --twice --fault unseeded_member_ids  # determinism check
    python -m consumers.sim --queue --seeds 200                # the queue simulation
    python -m consumers.sim --queue --seed 7 --fault dead_letter_twice  # a checker must fail

Prints a summary; exits 1 if any seed violated a promise, after printing each failing seed with
the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import sys

from consumers.sim.runner import ALL_FAULTS, QUEUE_FAULTS, SeedResult, run_seed, sweep

DEFAULT_STEPS = 400


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m consumers.sim", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of a sweep")
    parser.add_argument("--seed", type=int, help="replay this one seed, with its statistics")
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help=f"ticks per seed (default {DEFAULT_STEPS})"
    )
    parser.add_argument("--time-limit", type=float, help="stop starting seeds after this many s")
    parser.add_argument(
        "--queue", action="store_true", help="the queue simulation (leases, acks, dead letters)"
    )
    parser.add_argument(
        "--fault", choices=ALL_FAULTS + QUEUE_FAULTS, help="TEST ONLY: inject a bug"
    )
    parser.add_argument(
        "--twice",
        action="store_true",
        help="run every seed twice and compare the traces (determinism); a replay always does",
    )
    parser.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1:
        parser.error("--seeds and --steps must be >= 1")
    valid = QUEUE_FAULTS if args.queue else ALL_FAULTS
    if args.fault is not None and args.fault not in valid:
        mode = "--queue" if args.queue else "the group simulation"
        parser.error(f"--fault {args.fault} is not one of {mode}'s: {', '.join(valid)}")

    if args.seed is not None:
        result = run_seed(args.seed, args.steps, args.fault, twice=True, queue=args.queue)
        print(f"seed={result.seed} steps={result.steps} digest={result.digest} {result.stats}")
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
        queue=args.queue,
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
