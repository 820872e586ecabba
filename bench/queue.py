"""Queue benchmark: receive+ack against plain reads of the same records, in one run.

    python -m bench.queue [--records 20000] [--partitions 1] [--batch 100] [--receivers 4]

Cluster: three local nodes, replication factor 3, acks=all, 1 KiB records.
- the baseline: one client reading every record of the topic with plain `read`, `--batch`
  records per call;
- one queue receiver (`Client.queue`) receiving `--batch` records at a time and acking each
  batch, until every record is acked: records/s, and the ratio to the baseline (goal >= 0.5);
  then `--receivers` receivers (threads) of another group doing the same (their calls share
  the coordinator's rounds); then one receiver again, each batch's acks carried on the next
  receive (`receive(ack=...)`: one call and one coordinator write for both);
- Raft entries per acked record: the entries the `__groups` partitions committed during a
  queue phase (the growth of their commit index, from the nodes' /metrics) over the records
  acked (goal <= 0.05: leases and acks are batched, one entry per call, not per record);
- the share of the record bytes served by followers during a queue phase: the growth of each
  node's `flotilla_fetch_bytes_total`, the nodes that lead none of the topic's partitions over
  all (exact when one node leads them all, as with one partition; "n/a" otherwise), and the
  bytes served per record byte (a fetch answers whole stored batches), as for the plain read.
Prints a table and, last, one JSON line of the figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def receive_all(
    addresses: list[str], group: str, records: int, batch: int, receivers: int,
    carry: bool = False,
) -> tuple[float, int]:  # fmt: skip
    """Seconds for `receivers` receivers (threads, a client each) of a new queue group to
    receive and ack every record, batch by batch, from the first delivery on (the joins are
    not the figure), and how many records that covered."""
    lock = threading.Lock()
    done = threading.Event()
    state = {"acked": 0, "first": 0, "start": 0.0, "end": 0.0}
    deadline = time.monotonic() + 300

    def receiver() -> None:
        with (
            Client(addresses, timeout_s=30) as client,
            client.queue(group, TOPIC, invisible_ms=60_000) as queue,
        ):
            carried: list[Any] = []
            while not done.is_set() and time.monotonic() < deadline:
                deliveries = queue.receive(max_records=batch, timeout_s=0.5, ack=carried or None)
                with lock:
                    state["acked"] += len(carried)
                carried = []
                if not deliveries:
                    if state["acked"] >= records:
                        break
                    continue
                with lock:
                    if not state["start"]:
                        state["start"], state["first"] = time.perf_counter(), len(deliveries)
                if carry and state["acked"] + len(deliveries) < records:
                    carried = deliveries  # acked by the next receive
                    continue
                queue.ack(deliveries)
                with lock:
                    state["acked"] += len(deliveries)
                    if state["acked"] >= records and not done.is_set():
                        state["end"] = time.perf_counter()
                        done.set()

    threads = [threading.Thread(target=receiver) for _ in range(receivers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not done.is_set():
        raise SystemExit(f"{receivers} receivers acked {state['acked']} of {records} in 300 s")
    return state["end"] - state["start"], records - int(state["first"])


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


@dataclass(frozen=True, slots=True)
class Phase:
    receivers: int
    records_per_s: float
    entries: float  # __groups Raft entries committed during the phase
    entries_per_record: float
    served: dict[str, float]  # node -> record bytes it served during the phase
    follower_share: float | None
    carry: bool = False  # each batch's acks carried on the next receive


def measure(
    addresses: list[str], metrics: Mapping[str, str], leaders: set[str], args: argparse.Namespace,
    receivers: int, carry: bool = False,
) -> Phase:  # fmt: skip
    before = {node: scrape(address) for node, address in metrics.items()}
    group = f"{GROUP}-{receivers}{'-carry' if carry else ''}"
    seconds, counted = receive_all(addresses, group, args.records, args.batch, receivers, carry)
    after = {node: scrape(address) for node, address in metrics.items()}
    entries = groups_commit_index(after) - groups_commit_index(before)
    start_bytes, end_bytes = fetch_bytes(before), fetch_bytes(after)
    served = {node: end_bytes[node] - start_bytes.get(node, 0.0) for node in end_bytes}
    total = sum(served.values())
    share = None
    if len(leaders) == 1 and total:  # exact only when one node leads every partition
        share = sum(b for node, b in served.items() if node not in leaders) / total
    return Phase(receivers, counted / seconds, entries, entries / args.records, served, share,
                 carry)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--receivers", type=int, default=4, help="the second phase's receivers")
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
        addresses = cluster.addresses()
        with Client(addresses, timeout_s=30) as client:
            client.create_topic(TOPIC, partitions=args.partitions, replication_factor=3)
            fill(client, args.records, args.partitions)
            before = {node: scrape(address) for node, address in metrics.items()}
            read_s = read_all(client, args.records, args.partitions, args.batch)
            after = {node: scrape(address) for node, address in metrics.items()}
            read_bytes = sum(fetch_bytes(after).values()) - sum(fetch_bytes(before).values())
            leaders = {p.leader for p in client.describe_topic(TOPIC).partitions}
        phases = [measure(addresses, metrics, leaders, args, n) for n in (1, args.receivers)]
        phases.append(measure(addresses, metrics, leaders, args, 1, carry=True))
    read_rate = args.records / read_s
    record_bytes = args.records * len(RECORD)
    rows = [
        (f"plain read, {args.batch} per call (records/s)", f"{read_rate:,.0f}"),
        ("plain read: bytes served per record byte", f"{read_bytes / record_bytes:.2f}"),
    ]
    for phase in phases:
        name = f"{phase.receivers} receiver{'s' if phase.receivers > 1 else ''}"
        name += ", acks carried" if phase.carry else ""
        share = "n/a" if phase.follower_share is None else f"{phase.follower_share:.0%}"
        rows += [
            (f"{name}: receive {args.batch} + ack (rec/s)", f"{phase.records_per_s:,.0f}"),
            (f"{name}: vs plain read", f"{phase.records_per_s / read_rate:.2f}x"),
            (f"{name}: Raft entries per acked record", f"{phase.entries_per_record:.4f}"),
            (f"{name}: record bytes served by followers", share),
            (
                f"{name}: bytes served per record byte",
                f"{sum(phase.served.values()) / record_bytes:.2f}",
            ),
        ]
    for name, value in rows:
        print(f"{name:<60}{value:>12}")
    for phase in phases:
        print(f"{phase.receivers} receiver(s), bytes served per node (MB): " + ", ".join(
            f"{node}{' (leader)' if node in leaders else ''} {b / 1e6:.1f}"
            for node, b in sorted(phase.served.items())))  # fmt: skip
    one, many, carried = phases
    print(json.dumps({
        "read_records_per_s": round(read_rate),
        "queue_records_per_s": round(one.records_per_s),
        "queue_vs_read": round(one.records_per_s / read_rate, 2),
        "raft_entries_per_acked_record": round(one.entries_per_record, 4),
        "follower_bytes_share": None if one.follower_share is None else round(one.follower_share, 3),
        "receivers": many.receivers,
        "receivers_records_per_s": round(many.records_per_s),
        "receivers_vs_read": round(many.records_per_s / read_rate, 2),
        "receivers_raft_entries_per_acked_record": round(many.entries_per_record, 4),
        "carried_records_per_s": round(carried.records_per_s),
        "carried_vs_read": round(carried.records_per_s / read_rate, 2),
        "carried_raft_entries_per_acked_record": round(carried.entries_per_record, 4),
        "read_bytes_per_record_byte": round(read_bytes / record_bytes, 2),
        "queue_bytes_per_record_byte": round(sum(one.served.values()) / record_bytes, 2),
        "records": args.records, "partitions": args.partitions, "batch": args.batch,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
