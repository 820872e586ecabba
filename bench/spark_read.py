"""Spark read benchmark: format("flotilla") against a plain SDK read of the same data, in one run.

    python -m bench.spark_read [--records 100000] [--value-bytes 200] [--cores 2]

Cluster: three local nodes, one topic of 3 partitions, replication factor 3. Measures
- the SDK baseline: one client reading every partition in order (`Client.read`, 5000 a request);
- Spark (local[cores], minPartitions=cores) with Arrow record batches, and with row tuples, each
  after a warm-up job, the job summing value lengths so every row is materialised.
Prints a table and, last, one JSON line with records/s and the ratios `spark_vs_sdk` (Arrow) and
`arrow_vs_rows` (whether yielding Arrow batches pays).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

from cluster.local import LocalCluster
from flotilla import Client
from flotilla.spark import local_session

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"
TOPIC = "bench"


def _produce(client: Client, records: int, value_bytes: int) -> None:
    client.create_topic(TOPIC, partitions=3, replication_factor=3)
    value = b"v" * value_bytes
    with client.producer(linger_ms=5, batch_bytes=512 * 1024) as producer:
        futures = [producer.send(TOPIC, value, key=f"k{n % 50}".encode()) for n in range(records)]
        producer.flush()
        for future in futures:
            future.result(timeout=60)


def _sdk_read(client: Client) -> tuple[int, float]:
    started = time.perf_counter()
    count = 0
    for p in client.describe_topic(TOPIC).partitions:
        offset = p.log_start
        while offset < p.high_watermark:
            records = client.read(TOPIC, p.index, offset, max_records=5000)
            count += len(records)
            offset = records[-1].offset + 1
    return count, time.perf_counter() - started


def _spark_read(spark: Any, bootstrap: str, arrow: bool, cores: int) -> tuple[int, float]:
    df = (
        spark.read.format("flotilla")
        .option("bootstrap", bootstrap)
        .option("topic", TOPIC)
        .option("arrow", str(arrow).lower())
        .option("minPartitions", str(cores))
        .load()
    )
    started = time.perf_counter()
    row = df.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()[0]
    return int(row["n"]), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    spark = local_session("flotilla-bench", cores=args.cores)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="flotilla-bench-spark-") as root,
            LocalCluster(root, 3, config_text=CONFIG) as cluster,
        ):
            cluster.start()
            with Client(cluster.addresses(), timeout_s=30) as client:
                _produce(client, args.records, args.value_bytes)
                sdk_count, sdk_s = _sdk_read(client)
            _spark_read(spark, cluster.bootstrap, True, args.cores)  # warm-up: workers, plans
            arrow_count, arrow_s = _spark_read(spark, cluster.bootstrap, True, args.cores)
            rows_count, rows_s = _spark_read(spark, cluster.bootstrap, False, args.cores)
    finally:
        spark.stop()
    for name, count in (
        ("sdk", sdk_count),
        ("spark arrow", arrow_count),
        ("spark rows", rows_count),
    ):
        if count != args.records:
            raise SystemExit(f"{name} read {count} records, expected {args.records}")
    figures = {
        "records": args.records,
        "value_bytes": args.value_bytes,
        "spark_cores": args.cores,
        "sdk_records_per_s": round(sdk_count / sdk_s),
        "spark_arrow_records_per_s": round(arrow_count / arrow_s),
        "spark_rows_records_per_s": round(rows_count / rows_s),
    }
    figures["spark_vs_sdk"] = round(
        figures["spark_arrow_records_per_s"] / figures["sdk_records_per_s"], 3
    )
    figures["arrow_vs_rows"] = round(
        figures["spark_arrow_records_per_s"] / figures["spark_rows_records_per_s"], 3
    )
    print(f"{'reader':<14}{'records/s':>12}")
    for name, key in (
        ("sdk", "sdk_records_per_s"),
        ("spark arrow", "spark_arrow_records_per_s"),
        ("spark rows", "spark_rows_records_per_s"),
    ):
        print(f"{name:<14}{figures[key]:>12,}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
