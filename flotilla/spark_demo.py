"""The demo's Spark job: records per key of the demo topic, read with `format("flotilla")`.

    python -m flotilla.spark_demo        # FLOTILLA_BOOTSTRAP=127.0.0.1:7001 (comma list)

`run_spark_demo` starts a local SparkSession (local[2]), reads the whole topic from follower
replicas, counts records per key and prints the table; it returns the counts. Run as a module
(the docker-compose `spark` profile), it first fills the topic with `SEED_RECORDS` demo records
when the topic does not exist yet, so it works against a fresh cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from flotilla.client import Client
from flotilla.demo import KEYS, value_of
from flotilla.errors import TopicNotFound
from flotilla.spark import local_session

__all__ = ["run_spark_demo"]

SEED_RECORDS = 10_000


def seed_topic(bootstrap: str, topic: str, console: Console) -> None:
    """Creates and fills `topic` with demo records, unless it exists."""
    with Client(bootstrap.split(","), timeout_s=60) as client:
        try:
            client.describe_topic(topic)
            return
        except TopicNotFound:
            pass
        console.print(f"topic {topic!r} is missing: producing {SEED_RECORDS:,} demo records ...")
        client.create_topic(topic, partitions=3, replication_factor=3)
        with client.producer(linger_ms=5) as producer:
            futures = [
                producer.send(topic, value_of(n), key=f"user-{n % KEYS}".encode())
                for n in range(SEED_RECORDS)
            ]
            producer.flush()
            for future in futures:
                future.result(timeout=60)


def run_spark_demo(
    bootstrap: str,
    topic: str = "demo",
    console: Console | None = None,
    security: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """`security`: the data source's `tls_ca`, `tls_cert`, `tls_key`, `token` options (none:
    its defaults, the FLOTILLA_* variables)."""
    console = console or Console()
    console.print("[bold]spark[/]: starting a local SparkSession (local[2]) ...")
    spark = local_session("flotilla-demo")
    try:
        started = time.perf_counter()
        df = (
            spark.read.format("flotilla")
            .option("bootstrap", bootstrap)
            .option("topic", topic)
            .option("replica", "followers")
            .options(**(security or {}))
            .load()
        )
        rows = (
            df.selectExpr("cast(key as string) as key")
            .groupBy("key")
            .count()
            .orderBy("key")
            .collect()
        )
        elapsed = time.perf_counter() - started
    finally:
        spark.stop()
    counts = {str(row["key"]): int(row["count"]) for row in rows}
    table = Table(title=f"records per key in topic {topic!r} (Spark, read from followers)")
    table.add_column("key")
    table.add_column("records", justify="right")
    for key, count in counts.items():
        table.add_row(key, f"{count:,}")
    console.print(table)
    console.print(
        f"spark job: {sum(counts.values()):,} records, {len(counts)} keys in {elapsed:.1f} s"
    )
    return counts


if __name__ == "__main__":
    address = os.environ.get("FLOTILLA_BOOTSTRAP", "127.0.0.1:7001")
    seed_topic(address, "demo", Console())
    run_spark_demo(address)
