"""Consumer-group benchmark: a group's consumer against plain reads, in one run.

    python -m bench.groups [--records 60000] [--joins 12]

Cluster: three local nodes, replication factor 3, acks=all, 1 KiB records in a 6-partition topic.
- the baseline: one client reading every partition from its start with `read` (no group);
- one group consumer (`Client.consumer`) polling the same records from `earliest`, committing
  as it goes (auto-commit): records/s from its first record on (its join is the next figure),
  and the ratio to the baseline (goal >= 0.8);
- join-to-assigned: a consumer joins a group of three busy members and leaves again, `--joins`
  times: the time from `consumer(...)` to its first non-empty assignment, p50 and p99;
- rebalance pause: while those joins and leaves happen, the three members keep polling a topic a
  producer writes to; the largest gap between two consecutive polls of a member, against its
  poll timeout (goal: <= 2x: members are never stopped for a rebalance).
Prints a table and, last, one JSON line of the figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

from cluster.local import LocalCluster
from flotilla import Client
from flotilla.errors import FlotillaError

TOPIC, PARTITIONS = "bench-groups", 6
RECORD = b"g" * 1024
CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
POLL_TIMEOUT_S = 0.5


def fill(client: Client, records: int) -> None:
    with client.producer(linger_ms=5, batch_bytes=256 * 1024) as producer:
        for i in range(records):
            producer.send(TOPIC, RECORD, key=str(i).encode())
        producer.flush()


def read_all(client: Client, records: int) -> float:
    """Seconds to read every record of the topic with plain `read`, partition by partition."""
    start = time.perf_counter()
    seen = 0
    for partition in range(PARTITIONS):
        offset = 0
        while True:
            batch = client.read(TOPIC, partition, offset, max_records=500)
            if not batch:
                break
            seen += len(batch)
            offset = batch[-1].offset + 1
    if seen != records:
        raise SystemExit(f"plain read saw {seen} records, expected {records}")
    return time.perf_counter() - start


def consume_all(client: Client, records: int) -> tuple[float, int]:
    """Seconds for one group consumer to poll every record after its first (the join is
    measured on its own, below), and how many records that was."""
    seen, start = 0, 0.0
    deadline = time.monotonic() + 120
    with client.consumer("bench-throughput", [TOPIC], start="earliest") as consumer:
        while seen < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"the group consumer saw {seen} of {records} in 120 s")
            got = len(consumer.poll(max_records=500, timeout_s=1.0))
            if got and not seen:
                start, first = time.perf_counter(), got
            seen += got
    return time.perf_counter() - start, records - first


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rebalances(addresses: list[str], joins: int) -> tuple[list[float], dict[str, float]]:
    """Joins and leaves beside three busy members: join-to-assigned times (ms), and each
    member's largest gap between polls (ms) while they happen."""
    stop, measuring = threading.Event(), threading.Event()
    gaps: dict[str, float] = {}

    def member(name: str) -> None:
        with (
            Client(addresses, timeout_s=30) as client,
            client.consumer("bench-rebalance", [TOPIC], start="latest") as consumer,
        ):
            last, worst = time.monotonic(), 0.0
            while not stop.is_set():
                consumer.poll(max_records=100, timeout_s=POLL_TIMEOUT_S)
                now = time.monotonic()
                if measuring.is_set():
                    worst = max(worst, now - last)
                last = now
            gaps[name] = worst * 1000

    def produce() -> None:
        with Client(addresses, timeout_s=30) as client:
            while not stop.is_set():
                client.produce(TOPIC, RECORD)
                stop.wait(0.005)  # a steady trickle, ending at once when told

    def settled(client: Client) -> bool:
        info = client.describe_group("bench-rebalance")
        return len(info.members) == 3 and all(p.owner for p in info.partitions)

    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=produce))
    for thread in threads:
        thread.start()
    joined: list[float] = []
    try:
        with Client(addresses, timeout_s=30) as client:
            deadline = time.monotonic() + 60
            while not _quietly(settled, client):
                if time.monotonic() > deadline:
                    raise SystemExit("three members did not share every partition in 60 s")
                time.sleep(0.1)
            measuring.set()
            for _ in range(joins):
                start = time.monotonic()
                with client.consumer("bench-rebalance", [TOPIC], start="latest") as consumer:
                    while not consumer.assignment():
                        consumer.poll(max_records=100, timeout_s=0.05)
                        if time.monotonic() - start > 30:
                            raise SystemExit("a joining consumer got no partition in 30 s")
                    joined.append((time.monotonic() - start) * 1000)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    return joined, gaps


def _quietly(check: Callable[[Client], bool], client: Client) -> bool:
    try:
        return check(client)
    except FlotillaError:  # the group is not there yet
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--joins", type=int, default=12)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-bench-groups-") as root,
        LocalCluster(root, 3, config_text=CONFIG) as cluster,
    ):
        cluster.start()
        addresses = cluster.addresses()
        with Client(addresses, timeout_s=30) as client:
            client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            fill(client, args.records)
            read_s = read_all(client, args.records)
            group_s, group_records = consume_all(client, args.records)
        joined, gaps = rebalances(addresses, args.joins)
    read_rate, group_rate = args.records / read_s, group_records / group_s
    worst_gap = max(gaps.values()) if gaps else float("nan")
    rows = [
        ("plain read (records/s)", f"{read_rate:,.0f}"),
        ("group consumer (records/s)", f"{group_rate:,.0f}"),
        ("join to assigned p50 (ms)", f"{statistics.median(joined):.0f}"),
        ("join to assigned p99 (ms)", f"{percentile(joined, 0.99):.0f}"),
        ("largest poll gap of a member (ms)", f"{worst_gap:.0f}"),
        ("its poll timeout (ms)", f"{POLL_TIMEOUT_S * 1000:.0f}"),
    ]
    for name, value in rows:
        print(f"{name:<40}{value:>12}")
    print(json.dumps({
        "read_records_per_s": round(read_rate),
        "group_records_per_s": round(group_rate),
        "group_vs_read": round(group_rate / read_rate, 2),
        "join_to_assigned_ms_p50": round(statistics.median(joined)),
        "join_to_assigned_ms_p99": round(percentile(joined, 0.99)),
        "member_poll_gap_ms_max": round(worst_gap),
        "poll_gap_vs_poll_timeout": round(worst_gap / (POLL_TIMEOUT_S * 1000), 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
