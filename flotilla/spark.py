"""`format("flotilla")`: a PySpark (>= 4.2) Python data source reading topics across replicas.

    import flotilla.spark
    flotilla.spark.register(spark)
    df = (spark.read.format("flotilla").option("bootstrap", "127.0.0.1:7001")
          .option("topic", "orders").load())

The schema is the Kafka source's (`SCHEMA_DDL`). Options (names case-insensitive):
- `bootstrap` (required): comma list of node addresses.
- `topic`, or `topics` as a comma list.
- `startingOffsets` / `endingOffsets`: `earliest`, `latest` or Kafka-style JSON per partition,
  `{"orders": {"0": 42, "1": -2}}` (-2 earliest, -1 latest). Batch default: earliest to latest;
  streaming default start: latest (as Kafka).
- `minPartitions`: split big partitions into offset ranges to have at least this many tasks.
- `replica`: `any` (default; all replicas, rotated per task), `leader` (the leader, then the
  followers if it is down), `followers` (followers rotated, the leader only as a last resort).
- `maxRecordsPerRequest` (default 5000), `replicaTimeoutMs` (how long one replica is retried
  before failing over; default 2000), `arrow` (`true` by default: yield Arrow record batches when
  pyarrow is importable), and for streams `maxOffsetsPerTrigger` (records per micro-batch in all).
- `tls_ca`, `tls_cert`, `tls_key`, `token`: as `flotilla.Client`'s, for the clients the driver
  and every executor make (unset: each process's FLOTILLA_TLS_CA, ... variables). The files are
  read where each client is made: their paths must exist on the executors too. The token travels
  to the executors inside the planned tasks (it never appears in a repr).

Plan once on the driver: `latest` means the high watermark (the commit index) at planning time, so
a batch read is a consistent snapshot; every task carries its replica list (`flotilla.spark_plan`)
and reads with failover (`flotilla.spark_read`). Readers hold only options and planned ranges, so
they pickle to Spark's Python workers; SDK clients are created inside `read()`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from flotilla.spark_partition import (
    FlotillaPartition,
    describe_topics,
    group_offsets,
    partitions_of,
)
from flotilla.spark_plan import (
    OffsetRange,
    SparkOptionError,
    SparkOptions,
    parse_options,
    plan_ranges,
    resolve_offsets,
)
from flotilla.spark_read import SCHEMA_DDL, read_output
from flotilla.spark_stream import FlotillaStreamReader

__all__ = [
    "SCHEMA_DDL",
    "FlotillaDataSource",
    "FlotillaPartition",
    "SparkOptionError",
    "describe_topics",
    "local_session",
    "register",
]


def register(spark: Any) -> None:
    """Registers `format("flotilla")` with a SparkSession. Spark's Python workers must run an
    interpreter that can import `flotilla` (`PYSPARK_PYTHON`; `local_session` sees to it)."""
    spark.dataSource.register(FlotillaDataSource)


def local_session(app_name: str = "flotilla", cores: int = 2) -> Any:
    """A small local SparkSession (no UI, few shuffle partitions) whose Python workers run this
    interpreter, with `format("flotilla")` registered. For tests, the demo and the benchmark."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 (only here; readers stay light)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Python workers connect back to the JVM within this many seconds (Spark's default, 15, is
    # too short on a loaded machine: the streaming source runner then fails to start).
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "512m")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


class FlotillaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "flotilla"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return FlotillaBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FlotillaStreamReader(parse_options(self.options, streaming=True))


class FlotillaBatchReader(DataSourceReader):
    def __init__(self, options: SparkOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        addresses: dict[str, str] = {}
        topics = describe_topics(self.options, addresses)
        start = resolve_offsets(
            "startingOffsets", self.options.starting_offsets, topics, group_offsets(self.options)
        )
        end = resolve_offsets("endingOffsets", self.options.ending_offsets, topics)
        ranges = plan_ranges(topics, start, end, self.options, addresses=addresses)
        if not ranges:  # nothing to read: one empty task keeps the plan well formed
            return [FlotillaPartition(OffsetRange(self.options.topics[0], 0, 0, 0, ()))]
        return partitions_of(ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_output(partition.value, self.options)
