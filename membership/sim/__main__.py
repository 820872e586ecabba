"""`python -m membership.sim --nodes 32 --loss 0.1 --seeds 20`: seeded SWIM clusters, one JSON line.

Runs `--seeds` independent seeds (`--seed-base`, `--seed-base + 1`, ...) of the scenario in
`membership.sim.scenario` and prints one JSON line with crash detection times, false `dead`
declarations per node-hour, convergence times after a join, a leave and a partition heal, and
messages per node per protocol period. `--fault` runs a deliberately broken member instead.
A single seed replays with `--seeds 1 --seed-base <seed>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from membership.config import SwimConfig
from membership.sim.faults import FAULTS
from membership.sim.scenario import Scenario, run_seed, summarize


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m membership.sim", description=__doc__)
    parser.add_argument("--nodes", type=int, default=32, help="cluster size (>= 4)")
    parser.add_argument("--loss", type=float, default=0.0, help="message loss rate 0..0.5")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeded runs")
    parser.add_argument("--seed-base", type=int, default=0, help="the first seed")
    parser.add_argument("--steady-s", type=float, default=60.0, help="steady phase length (s)")
    parser.add_argument("--tick-ms", type=int, default=100, help="length of one tick (ms)")
    parser.add_argument(
        "--delay-ticks", type=int, default=0, help="base one-way delay in ticks (0: same tick)"
    )
    parser.add_argument(
        "--jitter", type=float, default=0.05, help="share of messages 1..4 ticks later still"
    )
    parser.add_argument("--encode", action="store_true", help="round-trip messages via msgpack")
    parser.add_argument("--fault", choices=sorted(FAULTS), default="none")
    args = parser.parse_args(argv)
    if args.nodes < 4:
        parser.error(f"--nodes {args.nodes} is too small: use at least 4")
    if not 0.0 <= args.loss <= 0.5:
        parser.error(f"--loss {args.loss} is not valid: use 0..0.5")
    if args.delay_ticks < 0 or not 0.0 <= args.jitter <= 1.0:
        parser.error("--delay-ticks must be >= 0 and --jitter in 0..1")
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds} is not valid: use at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    scenario = Scenario(
        nodes=args.nodes,
        loss=args.loss,
        steady_s=args.steady_s,
        swim=SwimConfig.lan(tick_ms=args.tick_ms),
        base_delay_ticks=args.delay_ticks,
        jitter_fraction=args.jitter,
        encode=args.encode,
    )
    started = time.perf_counter()  # wall time of the run, reported only; the sim never reads it
    results = [
        run_seed(scenario, args.seed_base + index, FAULTS[args.fault])
        for index in range(args.seeds)
    ]
    summary = summarize(scenario, results, args.fault, time.perf_counter() - started)
    sys.stdout.write(json.dumps(summary, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
