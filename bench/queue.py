"""Queue benchmark: receive+ack against plain reads of the same records, in one run.

    python -m bench.queue [--records 20000] [--partitions 1] [--batch 100]

Cluster: three local nodes, replication factor 3, acks=all, 1 KiB records.
- the baseline: one client reading every record of the topic with plain `read`, `--batch`
  records per call;
- one queue receiver (`Client.queue`) receiving `--batch` records at a time and acking each
  batch, until every record is acked: records/s, and the ratio to the baseline (goal >= 0.5);
- Raft entries per acked record: the entries the `__groups` partitions committed during the
  queue phase (the growth of their commit index, from the nodes' /metrics) over the records
  acked (goal <= 0.05: leases and acks are batched, one entry per call, not per record);
- the share of the record bytes served by followers during the queue phase: the growth of each
  node's `flotilla_fetch_bytes_total`, the nodes that lead none of the topic's partitions over
  all (exact when one node leads them all, as with one partition; "n/a" otherwise).
Prints a table and, last, one JSON line of the figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from cluster.local import LocalCluster, free_port
from flotilla import Client

TOPIC, GROUP = "bench-queue", "bench-workers"
RECORD = b"q" * 1024
CONFIG = 'tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nfsync = "always"\n'
GROUPS_TOPIC = "__groups"


def fill(client: Client, records: int, partitions: int) -> None:
    with client.producer(linger_ms=5, batch_bytes=256 * 1024) as producer:
        for i in range(records):
            producer.send(TOPIC, RECORD, partition=i % partitions)
        producer.flush()


def read_all(client: Client, records: int, partitions: int, batch: int) -> float:
    """Seconds to read every record with plain `read`, `batch` records per call."""
    start = time.perf_counter()
    seen = 0
    for partition in range(partitions):
        offset = 0
        while got := client.read(TOPIC, partition, offset, max_records=batch):
            seen += len(got)
            offset = got[-1].offset + 1
    if seen != records:
        raise SystemExit(f"plain read saw {seen} records, expected {records}")
    return time.perf_counter() - start


def receive_all(client: Client, records: int, batch: int) -> tuple[float, int]:
    """Seconds for one receiver to receive and ack every record (batch by batch), from its
    first delivery on (its join is not the figure), and how many records that covered."""
    acked, start, first = 0, 0.0, 0
    deadline = time.monotonic() + 300
    with client.queue(GROUP, TOPIC, invisible_ms=60_000) as queue:
        while acked < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"the receiver acked {acked} of {records} in 300 s")
            deliveries = queue.receive(max_records=batch, timeout_s=1.0)
            if not deliveries:
                continue
            if not acked:
                start, first = time.perf_counter(), len(deliveries)
            queue.ack(deliveries)
            acked += len(deliveries)
    return time.perf_counter() - start, records - first


def scrape(address: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """One node's /metrics: sample name -> labels -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def groups_commit_index(
    scrapes: Mapping[str, Mapping[str, Mapping[tuple[tuple[str, str], ...], float]]],
) -> float:
    """The `__groups` partitions' commit indexes summed, each at its furthest replica."""
    furthest: dict[str, float] = {}
    for samples in scrapes.values():
        for labels, value in samples.get("flotilla_partition_commit_index", {}).items():
            named = dict(labels)
            if named.get("topic") == GROUPS_TOPIC:
                partition = named["partition"]
                furthest[partition] = max(furthest.get(partition, 0.0), value)
    return sum(furthest.values())


def fetch_bytes(
    scrapes: Mapping[str, Mapping[str, Mapping[tuple[tuple[str, str], ...], float]]],
) -> dict[str, float]:
    return {
        node: sum(samples.get("flotilla_fetch_bytes_total", {}).values())
        for node, samples in scrapes.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-bench-queue-") as root,
        LocalCluster(root, 3, config_text=CONFIG) as cluster,
    ):
        metrics = {}
        for spec in cluster.nodes.values():
            metrics[spec.node_id] = f"{spec.host}:{free_port(spec.host)}"
            spec.extra_args = ["--metrics", metrics[spec.node_id]]
        cluster.start()
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic(TOPIC, partitions=args.partitions, replication_factor=3)
            fill(client, args.records, args.partitions)
            read_s = read_all(client, args.records, args.partitions, args.batch)
            before = {node: scrape(address) for node, address in metrics.items()}
            queue_s, queue_records = receive_all(client, args.records, args.batch)
            after = {node: scrape(address) for node, address in metrics.items()}
            leaders = {p.leader for p in client.describe_topic(TOPIC).partitions}
    read_rate, queue_rate = args.records / read_s, queue_records / queue_s
    entries = groups_commit_index(after) - groups_commit_index(before)
    entries_per_record = entries / args.records
    start_bytes, end_bytes = fetch_bytes(before), fetch_bytes(after)
    served = {node: end_bytes[node] - start_bytes.get(node, 0.0) for node in end_bytes}
    total = sum(served.values())
    exact = len(leaders) == 1
    follower_share = (
        sum(b for node, b in served.items() if node not in leaders) / total
        if exact and total
        else None
    )
    rows = [
        (f"plain read, {args.batch} per call (records/s)", f"{read_rate:,.0f}"),
        (f"receive {args.batch} + ack (records/s)", f"{queue_rate:,.0f}"),
        ("receive+ack vs read", f"{queue_rate / read_rate:.2f}x"),
        ("__groups Raft entries", f"{entries:,.0f}"),
        ("Raft entries per acked record", f"{entries_per_record:.4f}"),
        ("record bytes served by followers",
         "n/a" if follower_share is None else f"{follower_share:.0%}"),
    ]  # fmt: skip
    for name, value in rows:
        print(f"{name:<44}{value:>14}")
    print("bytes served per node (MB): " + ", ".join(
        f"{node}{' (leader)' if node in leaders else ''} {b / 1e6:.1f}"
        for node, b in sorted(served.items())))  # fmt: skip
    print(json.dumps({
        "read_records_per_s": round(read_rate),
        "queue_records_per_s": round(queue_rate),
        "queue_vs_read": round(queue_rate / read_rate, 2),
        "groups_raft_entries": round(entries),
        "raft_entries_per_acked_record": round(entries_per_record, 4),
        "follower_bytes_share": None if follower_share is None else round(follower_share, 3),
        "records": args.records, "partitions": args.partitions, "batch": args.batch,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
