"""`python -m raft.sim`: sweep seeds through the Raft simulator, or replay one.

    python -m raft.sim --seeds 1000 --steps 5000            # seeds 0..999, 3 and 5 nodes
    python -m raft.sim --seeds 10000 --steps 400 --jobs 2   # in two processes
    python -m raft.sim --seed 42 --steps 5000 --nodes 5     # replay one seed, verbosely
    python -m raft.sim --seeds 200 --steps 2000 --fault double_vote   # a checker must fail
    python -m raft.sim --seeds 50 --steps 2000 --disk sim   # real storage on a simulated disk

Prints a summary; exits 1 if any seed violated an invariant, after printing each failing seed
with the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import logging
import sys

from raft.faults import FAULT_NAMES
from raft.sim.disk import DISK_MODES
from raft.sim.runner import SeedResult, run_seed, sweep


def _node_choices(text: str) -> tuple[int, ...]:
    try:
        choices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: use 3, 5 or 3,5") from None
    if not choices or any(n not in (3, 5) for n in choices):
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: group sizes must be 3 or 5")
    return choices


def main(argv: list[str] | None = None) -> int:
    # on a simulated disk, each injected write or fsync error is logged by the storage before
    # the host fail-stops; the sweep counts them (io_fail_stops) instead
    storage_log = logging.getLogger("flotilla.storage")
    level = storage_log.level
    storage_log.setLevel(logging.CRITICAL)
    try:
        return _main(argv)
    finally:
        storage_log.setLevel(level)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft.sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed of a sweep")
    parser.add_argument("--seed", type=int, help="replay this one seed, with its statistics")
    parser.add_argument("--steps", type=int, default=2000, help="ticks per seed (default 2000)")
    parser.add_argument(
        "--nodes",
        type=_node_choices,
        default=(3, 5),
        help="group size: 3, 5, or 3,5 to alternate by seed (default 3,5)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--time-limit", type=float, help="stop starting seeds after this many s")
    parser.add_argument("--fault", choices=FAULT_NAMES, help="TEST ONLY: inject a Raft bug")
    parser.add_argument(
        "--disk",
        choices=DISK_MODES,
        default="memory",
        help="hosts' storage: memory (the sim's model), sim (the real SegmentedLog and "
        "StateJournal on a SimDisk); sim-lying-fsync (a flush that does not fsync) and sim-retries-fsync (a failed fsync retried: fsyncgate) are TEST ONLY",
    )
    parser.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.jobs < 1:
        parser.error("--seeds, --steps and --jobs must be >= 1")

    if args.seed is not None:
        result = run_seed(args.seed, args.steps, args.nodes[0], args.fault, args.disk)
        print(f"seed={result.seed} nodes={result.nodes} steps={result.steps} {result.stats}")
        print(
            f"max_leader_wait_ticks={result.max_leader_wait} "
            f"max_commit_wait_ticks={result.max_commit_wait}"
        )
        if result.violation is not None:
            _report(result)
            return 1
        print("no violation")
        return 0

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    summary = sweep(
        seeds,
        args.steps,
        args.nodes,
        fault=args.fault,
        disk=args.disk,
        jobs=args.jobs,
        time_limit_s=args.time_limit,
        stop_on_failure=args.stop_on_failure,
        on_result=lambda r: _report(r) if r.violation is not None else None,
    )
    for line in summary.lines():
        print(line)
    if summary.failures:
        print(f"FAILED: {len(summary.failures)} seed(s) violated an invariant; replay with:")
        for failure in summary.failures[:20]:
            print(f"  {failure.replay}")
        return 1
    return 0


def _report(result: SeedResult) -> None:
    print(
        f"VIOLATION seed={result.seed} nodes={result.nodes} step={result.at_step} "
        f"{result.violation}: {result.detail}",
        flush=True,
    )
    print(f"  replay: {result.replay}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
