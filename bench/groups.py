"""Consumer-group benchmark: a group's consumer against plain reads, in one run.

    python -m bench.groups [--records 60000] [--joins 12]

Cluster: three local nodes, replication factor 3, acks=all, 1 KiB records in a 6-partition topic.
- the baseline: one client reading every partition from its start with `read` (no group);
- one group consumer (`Client.consumer`) polling the same records from `earliest`, committing
  as it goes (auto-commit): records/s, and the ratio to the baseline (goal >= 0.8);
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

from cluster.local import LocalCluster
from flotilla import Client

TOPIC, PARTITIONS = "bench-groups", 6
RECORD = b"g" * 1024
CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
POLL_TIMEOUT_S = 0.2


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


def consume_all(client: Client, records: int) -> float:
    """Seconds for one group consumer to poll every record (join included)."""
    start = time.perf_counter()
    seen = 0
    deadline = time.monotonic() + 120
    with client.consumer("bench-throughput", [TOPIC], start="earliest") as consumer:
        while seen < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"the group consumer saw {seen} of {records} in 120 s")
            seen += len(consumer.poll(max_records=500, timeout_s=1.0))
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rebalances(addresses: list[str], joins: int) -> tuple[list[float], dict[str, float]]:
    """Joins and leaves beside three busy members: join-to-assigned times (ms), and each
    member's largest gap between polls (ms) while they happen."""
    stop = threading.Event()
    gaps: dict[str, float] = {}
    ready = threading.Barrier(4)

    def member(name: str) -> None:
        with (
            Client(addresses, timeout_s=30) as client,
            client.consumer("bench-rebalance", [TOPIC], start="latest") as consumer,
        ):
            while not consumer.assignment():
                consumer.poll(max_records=100, timeout_s=POLL_TIMEOUT_S)
            ready.wait(timeout=60)
            last, worst = time.monotonic(), 0.0
            while not stop.is_set():
                consumer.poll(max_records=100, timeout_s=POLL_TIMEOUT_S)
                now = time.monotonic()
                worst, last = max(worst, now - last), now
            gaps[name] = worst * 1000

    def produce() -> None:
        with Client(addresses, timeout_s=30) as client:
            while not stop.is_set():
                client.produce(TOPIC, RECORD)
                time.sleep(0.005)

    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=produce))
    for thread in threads:
        thread.start()
    joined: list[float] = []
    try:
        ready.wait(timeout=60)
        with Client(addresses, timeout_s=30) as client:
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
            group_s = consume_all(client, args.records)
        joined, gaps = rebalances(addresses, args.joins)
    read_rate, group_rate = args.records / read_s, args.records / group_s
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
