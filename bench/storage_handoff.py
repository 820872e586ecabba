"""What a hand-off to the storage thread costs the event loop's process: CPU microseconds per
round trip (hand work over, await its result), `loop.run_in_executor` on a one-thread
`ThreadPoolExecutor` (what MultiRaft used) against `cluster.storage_thread.StorageThread.run`,
alternated in one run, on uvloop (the nodes' loop) where present.

    python -m bench.storage_handoff [--hops 5000] [--rounds 6]

Prints a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import time
from collections.abc import Awaitable, Callable

from cluster.storage_thread import StorageThread


def _work(rows: list[int]) -> int:
    return len(rows)


async def _hops(hand_off: Callable[[], Awaitable[int]], hops: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(hops):
        await hand_off()
    return (time.process_time() - cpu) / hops * 1e6, (time.perf_counter() - wall) / hops * 1e6


async def _measure(hops: int, rounds: int) -> dict[str, dict[str, float]]:
    loop = asyncio.get_running_loop()
    executor = concurrent.futures.ThreadPoolExecutor(1, "bench-executor")
    storage = StorageThread("bench-storage")
    rows = list(range(16))
    ways: dict[str, Callable[[], Awaitable[int]]] = {
        "run_in_executor": lambda: loop.run_in_executor(executor, _work, rows),
        "StorageThread.run": lambda: storage.run(_work, rows),
    }
    best = {way: {"cpu_us": float("inf"), "wall_us": float("inf")} for way in ways}
    try:
        for _ in range(rounds):
            for way, hand_off in ways.items():
                cpu_us, wall_us = await _hops(hand_off, hops)
                best[way]["cpu_us"] = min(best[way]["cpu_us"], cpu_us)
                best[way]["wall_us"] = min(best[way]["wall_us"], wall_us)
    finally:
        executor.shutdown()
        storage.shutdown()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=6, help="alternations (best of)")
    args = parser.parse_args(argv)
    try:
        import uvloop

        best = uvloop.run(_measure(args.hops, args.rounds))
    except ImportError:
        best = asyncio.run(_measure(args.hops, args.rounds))
    print(f"{'hand-off':<22}{'CPU us/hop':>12}{'wall us/hop':>13}")
    for way, figures in best.items():
        print(f"{way:<22}{figures['cpu_us']:>12.1f}{figures['wall_us']:>13.1f}")
    print(json.dumps({way: {k: round(v, 1) for k, v in f.items()} for way, f in best.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
