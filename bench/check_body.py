"""The server's check of a batch's records (`proto.records.check_body`): microseconds per batch,
its one msgspec pass against the chunked msgpack check (what every batch went through before),
alternated in one run so that the machine's other load weighs on both alike.

    python -m bench.check_body [--rounds 30]

Batches: 1 MiB and 64 KiB of 1 KiB records (bench.produce's), and 1 MiB of 100-byte records
with two headers each. Prints a table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from proto.records import check_body, encode_batch

BATCHES = {
    "1 MiB, 1 KiB records": (1024 * 1024, 1024, 0),
    "64 KiB, 1 KiB records": (64 * 1024, 1024, 0),
    "1 MiB, 100 B records + 2 headers": (1024 * 1024, 100, 2),
}
WAYS: dict[str, Callable[[bytes], None]] = {
    "one pass": check_body,
    "chunked": lambda batch: check_body(batch, whole_up_to=0),
}


def batch(total_bytes: int, record_bytes: int, headers: int) -> bytes:
    header_list = [(f"header-{n}", b"x" * 8) for n in range(headers)]
    count = max(1, total_bytes // (record_bytes + 16 * headers))
    rows = [(b"key-%d" % n, b"r" * record_bytes, header_list, 1_800_000_000_000 + n)
            for n in range(count)]  # fmt: skip
    return encode_batch(rows)


def best_us(check: Callable[[bytes], None], data: bytes, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        check(data)
    return (time.perf_counter() - started) / repeat * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="alternations (best of)")
    parser.add_argument("--repeat", type=int, default=20, help="checks per timing")
    args = parser.parse_args(argv)
    figures: dict[str, dict[str, float]] = {}
    for name, shape in BATCHES.items():
        data = batch(*shape)
        best = {way: float("inf") for way in WAYS}
        for _ in range(args.rounds):
            for way, check in WAYS.items():
                best[way] = min(best[way], best_us(check, data, args.repeat))
        figures[name] = best
    print(f"{'batch':<36}{'one pass us':>14}{'chunked us':>14}{'ratio':>8}")
    for name, best in figures.items():
        ratio = best["chunked"] / best["one pass"]
        print(f"{name:<36}{best['one pass']:>14.1f}{best['chunked']:>14.1f}{ratio:>7.1f}x")
    print(json.dumps({name: {way: round(us, 1) for way, us in best.items()}
                      for name, best in figures.items()}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
