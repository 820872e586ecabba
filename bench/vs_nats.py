"""Flotilla beside NATS JetStream R3 in one run: sync publish and 256 in flight.

    python -m bench.vs_nats [--sync-records 500] [--records 20000] [--rounds 3]

Both sides: three servers on this machine (127.0.0.1-3), three replicas, file storage, 1 KiB
messages, a Python client in this process. Flotilla as `bench.produce` runs it (acks=all,
fsync always) with a topic of one partition (one replicated log, as one NATS stream is);
NATS JetStream 2.x with one R3 file stream (`bench/nats.py`; note that JetStream acks a
publish once a quorum has it in its file store, and does not fsync each message: its
`sync_interval` default flushes every 2 minutes).
- sync: one in flight (`Client.produce` / PUB then wait for the ack): msgs/s, p50, p99;
- 256 in flight: Flotilla's batching producer (`linger_ms`, default 0) with at most 256
  records unresolved (the oldest future waited on when the window is full) / JetStream async
  publish with 256 acks outstanding: msgs/s;
and the CPU each spends per message, servers and client summed (/proc). Each case runs on one
side then the other, `--rounds` times, alternating which goes first (medians), so that other
load on the machine weighs on both alike. Skipped, with a message, when `nats-server` is not on
PATH (Debian: `apt-get install nats-server`); Flotilla's figures are printed either way. Prints
a table and, last, one JSON line with the ratios (goal: `async_256_vs_nats` >= 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.nats import JetStreamPublisher, nats_server, stream
from bench.produce import CONFIG, RECORD, process_cpu_s
from cluster.local import LocalCluster
from flotilla import Client

WINDOW = 256


def flotilla_sync(client: Client, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        client.produce("bench", RECORD, partition=0)
        latencies.append(time.perf_counter() - started)
    return latencies


def flotilla_window(client: Client, count: int, linger_ms: float) -> None:
    """`count` records through the batching producer, at most WINDOW unresolved."""
    window: deque[Future[Any]] = deque()
    with client.producer(linger_ms=linger_ms, batch_bytes=1 << 20) as producer:
        for _ in range(count):
            if len(window) >= WINDOW:
                window.popleft().result()
            window.append(producer.send("bench", RECORD, partition=0))
        for future in window:
            future.result()


def nats_sync(publisher: JetStreamPublisher, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        publisher.publish_sync("bench", RECORD)
        latencies.append(time.perf_counter() - started)
    return latencies


class Side:
    """One system's processes (servers and this client): rates, latencies and CPU per case."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = [os.getpid(), *pids]
        self.rates: dict[str, list[float]] = {"sync": [], "window": []}
        self.latencies: list[float] = []
        self.cpu_ms: dict[str, list[float]] = {"sync": [], "window": []}

    def run(self, case: str, count: int, work: Callable[[], list[float] | None]) -> None:
        before = sum(process_cpu_s(pid) for pid in self.pids)
        started = time.perf_counter()
        latencies = work()
        elapsed = time.perf_counter() - started
        spent = sum(process_cpu_s(pid) for pid in self.pids) - before
        self.rates[case].append(count / elapsed)
        self.cpu_ms[case].append(spent / count * 1000)
        if latencies is not None:
            self.latencies += latencies

    def figures(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "sync_msgs_per_s": round(statistics.median(self.rates["sync"])),
            "sync_p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
            "sync_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
            "sync_cpu_ms_per_msg": round(statistics.median(self.cpu_ms["sync"]), 3),
            "window_msgs_per_s": round(statistics.median(self.rates["window"])),
            "window_cpu_ms_per_msg": round(statistics.median(self.cpu_ms["window"]), 3),
        }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync-records", type=int, default=500, help="per round")
    parser.add_argument("--records", type=int, default=20_000, help="256 in flight, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=0.0, help="Flotilla's producer")
    args = parser.parse_args(argv)
    if nats_server() is None:
        print("NATS baseline skipped: nats-server is not on PATH "
              "(Debian: apt-get install nats-server); Flotilla alone")  # fmt: skip
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="flotilla-vs-nats-", dir=os.getcwd())
        ))  # fmt: skip
        cluster = stack.enter_context(LocalCluster(root / "flotilla", 3, config_text=CONFIG))
        cluster.start()
        client = stack.enter_context(Client(cluster.addresses(), timeout_s=60))
        client.create_topic("bench", partitions=1, replication_factor=3)
        client.produce("bench", RECORD, partition=0)
        pids = [spec.process.pid for spec in cluster.nodes.values() if spec.process is not None]
        sides: dict[str, tuple[Side, dict[str, Callable[[], list[float] | None]]]] = {
            "flotilla": (Side(pids), {
                "sync": lambda: flotilla_sync(client, args.sync_records),
                "window": lambda: flotilla_window(client, args.records, args.linger_ms),
            }),
        }  # fmt: skip
        if nats_server() is not None:
            nats, publisher = stack.enter_context(stream(root / "nats"))
            sides["nats"] = (Side(nats.pids), {
                "sync": lambda: nats_sync(publisher, args.sync_records),
                "window": lambda: publisher.publish_window("bench", RECORD, args.records, WINDOW),
            })  # fmt: skip
            nats_sync(publisher, 50)  # warm-up, as Flotilla's first produce above
        for number in range(args.rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for case, count in (("sync", args.sync_records), ("window", args.records)):
                for name in order:
                    side, work = sides[name]
                    side.run(case, count, work[case])
        figures = {name: side.figures() for name, (side, _) in sides.items()}
    return report(figures, args)


def report(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> int:
    names = {"flotilla": "Flotilla RF3, acks=all, fsync", "nats": "NATS JetStream R3, file"}
    print(f"{'case':<46}{'msgs/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/msg':>12}")
    for name, values in figures.items():
        print(
            f"{names[name] + ', sync (1 in flight)':<46}{values['sync_msgs_per_s']:>10,}"
            f"{values['sync_p50_ms']:>9.2f}{values['sync_p99_ms']:>9.2f}"
            f"{values['sync_cpu_ms_per_msg']:>12.3f}"
        )
        print(
            f"{names[name] + f', {WINDOW} in flight':<46}{values['window_msgs_per_s']:>10,}"
            f"{'':>9}{'':>9}{values['window_cpu_ms_per_msg']:>12.3f}"
        )
    line: dict[str, object] = {
        "flotilla": figures["flotilla"], "nats": figures.get("nats"),
        "rounds": args.rounds, "sync_records": args.sync_records, "records": args.records,
        "window": WINDOW, "linger_ms": args.linger_ms,
    }  # fmt: skip
    if "nats" in figures:
        ours, theirs = figures["flotilla"], figures["nats"]
        ratios = {
            "sync_vs_nats": round(ours["sync_msgs_per_s"] / theirs["sync_msgs_per_s"], 3),
            "sync_p50_vs_nats": round(ours["sync_p50_ms"] / theirs["sync_p50_ms"], 3),
            "async_256_vs_nats": round(ours["window_msgs_per_s"] / theirs["window_msgs_per_s"], 3),
            "sync_cpu_vs_nats": round(ours["sync_cpu_ms_per_msg"] / theirs["sync_cpu_ms_per_msg"], 3),
        }  # fmt: skip
        print(
            f"Flotilla / NATS: sync {ratios['sync_vs_nats']:.2f}x msgs/s "
            f"(p50 {ratios['sync_p50_vs_nats']:.2f}x), {WINDOW} in flight "
            f"{ratios['async_256_vs_nats']:.2f}x msgs/s (goal >= 2), "
            f"sync CPU per message {ratios['sync_cpu_vs_nats']:.2f}x"
        )
        line.update(ratios)
        line["async_256_goal_met"] = ratios["async_256_vs_nats"] >= 2
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
