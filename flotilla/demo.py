"""The main job, `flotilla demo` (`make demo`): a local 3-node cluster end to end.

It starts three real node processes on loopback with mutual TLS (a CA and certificates made in
its temporary directory; the client presents the `admin` certificate), creates a topic (3 partitions, replication
factor 3), produces `count` keyed records with the batching producer while showing progress,
reads them all back from *follower* replicas and checks every one, prints throughput and the
cluster status, and stops every node (leaving no process behind, even on Ctrl-C or failure).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from cluster.local import LocalCluster
from flotilla.client import Client
from flotilla.tools import status

__all__ = ["DemoResult", "run_demo", "tls_settings"]

TOPIC = "demo"
KEYS = 20
DEMO_CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"


@dataclass(frozen=True, slots=True)
class DemoResult:
    produced: int
    read_back: int
    produce_s: float
    read_s: float
    bootstrap: str


def value_of(n: int) -> bytes:
    return f'{{"order": {n}, "user": "user-{n % KEYS}", "amount": {n % 997}}}'.encode()


def run_demo(
    count: int = 100_000,
    console: Console | None = None,
    after: Callable[[LocalCluster, Client], object] | None = None,
) -> DemoResult:
    console = console or Console()
    with (
        tempfile.TemporaryDirectory(prefix="flotilla-demo-") as root,
        LocalCluster(root, 3, config_text=DEMO_CONFIG, tls=True) as cluster,
    ):
        console.print("[bold]starting[/] a 3-node cluster on 127.0.0.1-3 (mutual TLS) ...")
        cluster.start()
        console.print(f"cluster up; bootstrap [cyan]{cluster.bootstrap}[/]")
        with Client(cluster.addresses(), timeout_s=30, **tls_settings(cluster)) as client:
            client.create_topic(TOPIC, partitions=3, replication_factor=3)
            produce_s = _produce(client, count, console)
            read_back, read_s = _read_from_followers(client, count, console)
            megabytes = sum(len(value_of(n)) for n in range(count)) / 1e6
            console.print(
                f"produced [bold]{count:,}[/] records ({megabytes:.1f} MB) in {produce_s:.2f} s: "
                f"[green]{count / produce_s:,.0f} records/s[/], {megabytes / produce_s:.1f} MB/s "
                "(3 replicas, fsync always, acks=all)"
            )
            console.print(
                f"read back {read_back:,} records from follower replicas in {read_s:.2f} s: [green]{read_back / read_s:,.0f} records/s[/]"
            )
            status(client, console)
            if after is not None:
                after(cluster, client)
        console.print("stopping the cluster ...")
        for node_id in cluster.nodes:
            cluster.stop(node_id)
    if read_back != count:
        raise SystemExit(f"demo failed: read back {read_back} of {count} records")
    console.print(
        "[bold green]demo complete[/]: every record was read back from a follower replica"
    )
    return DemoResult(count, read_back, produce_s, read_s, cluster.bootstrap)


def tls_settings(cluster: LocalCluster) -> dict[str, str]:
    """`Client` keyword arguments for `cluster`: its admin client certificate, when TLS."""
    paths = cluster.tls
    if paths is None:
        return {}
    return {"tls_ca": str(paths.ca), "tls_cert": str(paths.cert), "tls_key": str(paths.key)}


def _produce(client: Client, count: int, console: Console) -> float:
    columns = (TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    started = time.perf_counter()
    with (
        Progress(*columns, console=console, transient=True) as progress,
        client.producer(linger_ms=5, batch_bytes=256 * 1024) as producer,
    ):
        task = progress.add_task("produce", total=count)
        done = 0
        futures = []
        for n in range(count):
            futures.append(producer.send(TOPIC, value_of(n), key=f"user-{n % KEYS}".encode()))
            if len(futures) == 5000:
                for future in futures:
                    future.result()
                done += len(futures)
                futures = []
                progress.update(task, completed=done)
        producer.flush()
        for future in futures:
            future.result()
        progress.update(task, completed=count)
    return time.perf_counter() - started


def _read_from_followers(client: Client, count: int, console: Console) -> tuple[int, float]:
    info = client.describe_topic(TOPIC)
    expected = {value_of(n) for n in range(count)}
    seen = 0
    started = time.perf_counter()
    for partition in info.partitions:
        followers = [r for r in partition.replicas if r != partition.leader] or list(
            partition.replicas
        )
        replica = followers[partition.index % len(followers)]
        offset = partition.log_start
        deadline = time.monotonic() + 60
        while offset < partition.high_watermark and time.monotonic() < deadline:
            records = client.read(
                TOPIC, partition.index, offset, max_records=10_000, replica=replica
            )
            if not records:
                time.sleep(0.05)  # the follower has not applied the tail yet
                continue
            for record in records:
                if record.value not in expected:
                    raise SystemExit(
                        f"demo failed: unexpected record at {TOPIC}/{partition.index}@{record.offset}"
                    )
            seen += len(records)
            offset = records[-1].offset + 1
        console.print(
            f"partition {partition.index}: read {partition.high_watermark - partition.log_start:,} records from follower {replica}"
        )
    return seen, time.perf_counter() - started
