"""format("flotilla") on a local SparkSession (local[2]) against a real 3-node cluster.

One session and one cluster for the module (Spark starts slowly). The test that kills a node runs
last: it leaves the cluster with two nodes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client
from flotilla.spark import local_session
from flotilla.spark_plan import OffsetRange, parse_options
from flotilla.spark_read import read_range

pytestmark = pytest.mark.integration
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("spark"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = local_session("flotilla-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.addresses(), timeout_s=30) as sdk:
        yield sdk


def produce(client: Client, topic: str, count: int, partitions: int = 3, first: int = 0) -> None:
    client.create_topic(topic, partitions=partitions, replication_factor=3)
    with client.producer(linger_ms=2) as producer:
        futures = [
            producer.send(
                topic,
                f"{topic}-{n}".encode(),
                key=f"k{n % 5}".encode(),
                headers=[("n", str(n).encode())] if n % 2 else None,
            )
            for n in range(first, first + count)
        ]
        producer.flush()
        for future in futures:
            future.result(timeout=30)
    wait_replicated(client, topic)


def wait_replicated(client: Client, topic: str) -> None:
    """Until every replica has applied everything committed: a follower learns the commit index
    with the leader's next message, so a read right after a produce may see less there."""

    def caught_up() -> bool:
        for p in client.describe_topic(topic).partitions:
            for replica in p.replicas:
                records = client.read(topic, p.index, p.log_start, 100_000, replica=replica)
                if len(records) != p.high_watermark - p.log_start:
                    return False
        return True

    wait_until(caught_up, 30, f"every replica of {topic} to apply what is committed")


def sdk_rows(client: Client, topic: str) -> dict[int, list[tuple[Any, ...]]]:
    rows: dict[int, list[tuple[Any, ...]]] = {}
    for p in client.describe_topic(topic).partitions:
        records = client.read(topic, p.index, p.log_start, max_records=100_000)
        rows[p.index] = [
            (r.key, r.value, r.offset, r.timestamp_ms, [tuple(h) for h in r.headers])
            for r in records
        ]
    return rows


def spark_rows(df: Any) -> dict[int, list[tuple[Any, ...]]]:
    rows: dict[int, list[tuple[Any, ...]]] = {}
    for row in sorted(df.collect(), key=lambda r: (r.partition, r.offset)):
        millis = round(row.timestamp.timestamp() * 1000)
        headers = [(h.key, bytes(h.value)) for h in row.headers]
        entry = (bytes(row.key), bytes(row.value), row.offset, millis, headers)
        rows.setdefault(row.partition, []).append(entry)
    return rows


def started_tasks(tracker: Any) -> int:
    """Tasks of the running jobs that have started (finished or running) so far."""
    count = 0
    for job_id in tracker.getActiveJobsIds():
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            if stage:
                count += stage.numCompletedTasks + stage.numActiveTasks + stage.numFailedTasks
    return count


def reader(spark: Any, cluster: LocalCluster, topic: str, **options: str) -> Any:
    builder = spark.read.format("flotilla").option("bootstrap", cluster.bootstrap)
    builder = builder.option("topic", topic)
    for name, value in options.items():
        builder = builder.option(name, value)
    return builder.load()


def test_rows_equal_the_sdk_partition_by_partition(
    spark: Any, cluster: LocalCluster, client: Client
) -> None:
    produce(client, "rows", 400)
    expected = sdk_rows(client, "rows")
    assert sum(len(v) for v in expected.values()) == 400
    for arrow, replica in (("true", "leader"), ("false", "followers")):
        df = reader(spark, cluster, "rows", arrow=arrow, replica=replica, minPartitions="7")
        assert df.rdd.getNumPartitions() >= 7
        assert spark_rows(df) == expected, f"arrow={arrow}, replica={replica}"
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,headers:array<struct<key:string,value:binary>>>"
    )
    window = reader(
        spark,
        cluster,
        "rows",
        startingOffsets=json.dumps({"rows": {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({"rows": {"0": 10, "2": 5}}),
    )
    got = spark_rows(window)
    assert got[0] == expected[0][3:10] and got[1] == expected[1] and got[2] == expected[2][:5]


def test_bad_options_name_the_option(spark: Any, cluster: LocalCluster, client: Client) -> None:
    client.create_topic("opts", partitions=1, replication_factor=3)
    client.produce("opts", b"a", partition=0)
    client.produce("opts", b"b", partition=0)
    cases = [
        ({"topic": "missing"}, "option 'topic': topic 'missing' does not exist"),
        (
            {"topic": "opts", "startingOffsets": "{not json"},
            "option 'startingOffsets'=.* malformed",
        ),
        (
            {
                "topic": "opts",
                "startingOffsets": '{"opts": {"0": 2}}',
                "endingOffsets": '{"opts": {"0": 1}}',
            },
            "option 'endingOffsets': opts/0 ends at 1, before startingOffsets 2",
        ),
        ({"topic": "opts", "replica": "nearest"}, "option 'replica'="),
        ({"topic": "opts", "minPartitions": "0"}, "option 'minPartitions'="),
    ]
    for options, message in cases:
        builder = spark.read.format("flotilla").option("bootstrap", cluster.bootstrap)
        for name, value in options.items():
            builder = builder.option(name, value)
        with pytest.raises(Exception, match=message):
            builder.load().collect()


def test_stream_restarts_from_its_checkpoint_exactly_once(
    spark: Any, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    produce(client, "stream", 60, partitions=2)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run_query() -> list[int]:
        stream = (
            spark.readStream.format("flotilla")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", "stream")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "25")
            .load()
            .selectExpr("cast(value as string) as value", "partition", "offset")
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
            return [int(p["numInputRows"]) for p in query.recentProgress]
        finally:
            query.stop()

    first_batches = run_query()
    assert sum(first_batches) == 60 and max(first_batches) <= 25, first_batches
    produce(client, "stream", 40, partitions=2, first=60)
    second_batches = run_query()
    assert sum(second_batches) == 40, second_batches
    values = [row.value for row in spark.read.parquet(str(sink)).collect()]
    assert sorted(values) == sorted(f"stream-{n}" for n in range(100))


def test_a_read_can_start_at_a_consumer_groups_committed_offsets(
    spark: Any, cluster: LocalCluster, client: Client
) -> None:
    """startingOffsets "group:<name>": where the group committed, earliest where it did not."""
    produce(client, "grouped", 60)
    ends = [p.high_watermark for p in client.describe_topic("grouped").partitions]
    assert all(end > 4 for end in ends)
    client.reset_group_offsets("spark-readers", "grouped", to={0: 4, 2: ends[2]})
    df = reader(spark, cluster, "grouped", startingOffsets="group:spark-readers")
    got = {(row.partition, row.offset) for row in df.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(4, ends[0])} | {(1, o) for o in range(ends[1])}


def test_a_read_over_mutual_tls(spark: Any, tmp_path: Path) -> None:
    """The options tls_ca, tls_cert and tls_key reach the driver's and the executors' clients
    (a one-node cluster with mutual TLS, whose nodes accept no client without a certificate)."""
    with LocalCluster(tmp_path / "tls", 1, config_text=CONFIG, tls=True) as secure:
        secure.start()
        assert secure.tls is not None
        files = {"tls_ca": str(secure.tls.ca), "tls_cert": str(secure.tls.cert)}
        files["tls_key"] = str(secure.tls.key)
        with Client(secure.addresses(), timeout_s=30, **files) as admin:
            admin.create_topic("secure", partitions=2, replication_factor=1)
            for n in range(6):
                admin.produce("secure", b"s%d" % n, key=b"k%d" % n)
            expected = sdk_rows(admin, "secure")
        df = reader(spark, secure, "secure", **files)
        assert spark_rows(df) == expected and sum(map(len, expected.values())) == 6


def test_a_replica_killed_while_a_job_runs_does_not_fail_it(
    spark: Any, cluster: LocalCluster, client: Client
) -> None:
    produce(client, "failover", 3000)
    expected = sdk_rows(client, "failover")
    info = client.describe_topic("failover")
    last = info.partitions[-1]
    victim = last.leader
    # replica=leader puts the victim first in every range of the last partition, whose tasks
    # Spark schedules last; small requests and many tasks keep the job running when the node
    # dies, so those tasks must fail over (checked below: they had not started at the kill).
    df = reader(
        spark, cluster, "failover", replica="leader", minPartitions="12",
        maxRecordsPerRequest="20", replicaTimeoutMs="500",
    )  # fmt: skip
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["rows"] = spark_rows(df)
        except Exception as error:  # reported below
            result["error"] = error

    job = threading.Thread(target=run)
    job.start()
    tracker = spark.sparkContext.statusTracker()
    wait_until(lambda: tracker.getActiveJobsIds() or not job.is_alive(), 120, "the job to start")
    started_at_kill = started_tasks(tracker)
    cluster.kill(victim)
    job.join(timeout=300)
    assert "error" not in result, result.get("error")
    assert result["rows"] == expected
    # 12 ranges, 4 per partition in partition order: the last partition's are tasks 8..11.
    assert started_at_kill <= 8, f"{started_at_kill} of 12 tasks had started at the kill"
    # The same read path, deterministically: a range whose first replica is the dead node.
    options = parse_options(
        {"bootstrap": ",".join(cluster.addresses()), "topic": "failover", "replicaTimeoutMs": "500"}
    )
    others = tuple(r for r in last.replicas if r != victim)
    failovers: list[tuple[str, str]] = []
    chunks = read_range(
        OffsetRange("failover", last.index, last.log_start, last.high_watermark, (victim, *others)),
        options,
        on_failover=lambda replica, why: failovers.append((replica, why)),
    )
    values = [r.value for chunk in chunks for r in chunk]
    assert values == [row[1] for row in expected[last.index]]
    assert failovers and failovers[0][0] == victim, failovers
