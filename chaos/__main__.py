"""`python -m chaos run ...` (one run) and `python -m chaos sweep ...` (nemesis x seed table)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from chaos.nemesis import MOVES, NEMESES
from chaos.run import RunConfig, print_outcome, run, sweep, sweep_table
from chaos.workload import WorkloadConfig

# 'all': every nemesis that runs on any cluster; churn (MOVES) needs spare nodes and is named
ALL = tuple(n for n in NEMESES if n not in MOVES)


def _names(text: str) -> tuple[str, ...]:
    names = ALL if text == "all" else tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in NEMESES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown nemeses {unknown}; choose from {list(NEMESES)}")
    return names


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    try:
        return float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MIN,MAX seconds") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("run", "sweep"):
        sub = commands.add_parser(command)
        sub.add_argument("--nodes", type=int, default=3)
        sub.add_argument("--nemesis", type=_names, default=_names("partition-random,kill-leader,pause"),
                         help=f"comma-separated, or 'all' (every one but {','.join(MOVES)}, "
                              f"which needs more nodes than replicas): {','.join(NEMESES)}")  # fmt: skip
        sub.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
        sub.add_argument("--partitions", type=int, default=2)
        sub.add_argument("--producers", type=int, default=3)
        sub.add_argument("--root", type=Path, default=Path("chaos-runs"))
        sub.add_argument("--quiet-s", type=_range, default=(1.0, 3.0), help="MIN,MAX gap (s)")
        sub.add_argument("--fault-s", type=_range, default=(2.0, 5.0), help="MIN,MAX fault (s)")
        sub.add_argument("--max-faults", type=int, default=0, help="0: as many as fit")
        sub.add_argument("--replace-after-s", type=float, default=None,
                         help="nodes' replace_after_s: a short one makes faults move data")  # fmt: skip
        sub.add_argument("--group-members", type=int, default=0,
                         help="members of a consumer group reading the topic (0: none)")  # fmt: skip
        sub.add_argument("--queue-receivers", type=int, default=0,
                         help="receiver processes of a queue group sharing the topic, acking, "
                              "releasing, rejecting and crashing (0: none)")  # fmt: skip
        sub.add_argument("--delayed", type=float, default=0.0,
                         help="delayed records a second to <topic>-delayed beside the normal "
                              "workload, judged by chaos.delay_checker (0: none)")  # fmt: skip
        sub.add_argument("--no-tls", dest="tls", action="store_false",
                         help="plaintext nodes and clients (default: mutual TLS everywhere, "
                              "the harness's own CA)")  # fmt: skip
        sub.add_argument("--unsafe-ack-before-commit", action="store_true", help=argparse.SUPPRESS)
        sub.add_argument("--unsafe-read-uncommitted", action="store_true", help=argparse.SUPPRESS)
        if command == "run":
            sub.add_argument("--seed", type=int, default=7)
        else:
            sub.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    unsafe = tuple(
        flag
        for flag, on in (
            ("--unsafe-ack-before-commit", args.unsafe_ack_before_commit),
            ("--unsafe-read-uncommitted", args.unsafe_read_uncommitted),
        )
        if on
    )
    config = RunConfig(
        nodes=args.nodes,
        nemeses=args.nemesis,
        duration_s=args.duration,
        root=args.root,
        workload=WorkloadConfig(partitions=args.partitions, producers=args.producers),
        unsafe_flags=unsafe,
        quiet_s=args.quiet_s,
        fault_s=args.fault_s,
        max_faults=args.max_faults,
        replace_after_s=args.replace_after_s,
        group_members=args.group_members,
        queue_receivers=args.queue_receivers,
        delayed=args.delayed,
        tls=args.tls,
    )
    if args.command == "run":
        outcome = run(replace(config, seed=args.seed))
        print_outcome(outcome)
        return 0 if outcome.ok else 1
    seeds = [int(s) for s in args.seeds.split(",") if s]
    outcomes = sweep(config, args.nemesis, seeds)
    print(sweep_table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"FAILED: {o.directory}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
