"""Option parsing and planning of the Spark data source, without Spark or a cluster."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from flotilla import spark_stream
from flotilla.certs import init_ca, issue_client
from flotilla.spark_plan import (
    OffsetRange,
    SparkOptionError,
    parse_options,
    plan_ranges,
    replica_order,
    resolve_offsets,
    split_range,
)
from flotilla.spark_read import client_for
from flotilla.spark_stream import admit
from flotilla.types import PartitionInfo, TopicInfo

TOPIC = TopicInfo(
    "t",
    (
        PartitionInfo(0, "n1", ("n1", "n2", "n3"), high_watermark=100, log_start=0),
        PartitionInfo(1, "n2", ("n2", "n3", "n1"), high_watermark=10, log_start=5),
    ),
)


def options(**extra: str) -> dict[str, str]:
    return {"bootstrap": "127.0.0.1:7001", "topic": "t", **extra}


def test_offsets_resolve_like_the_kafka_source() -> None:
    parsed = parse_options(options(startingOffsets='{"t": {"0": 40}}'))
    start = resolve_offsets("startingOffsets", parsed.starting_offsets, {"t": TOPIC})
    end = resolve_offsets("endingOffsets", parsed.ending_offsets, {"t": TOPIC})
    assert start == {"t": {0: 40, 1: 5}} and end == {"t": {0: 100, 1: 10}}
    with pytest.raises(SparkOptionError, match="option 'startingOffsets': offset 200 of t/0"):
        resolve_offsets("startingOffsets", '{"t": {"0": 200}}', {"t": TOPIC})
    with pytest.raises(SparkOptionError, match="option 'endingOffsets': partition t/7"):
        resolve_offsets("endingOffsets", '{"t": {"7": 1}}', {"t": TOPIC})


def test_a_groups_committed_offsets_start_the_read_earliest_where_none() -> None:
    parsed = parse_options(options(startingOffsets="group:billing"))
    assert parsed.starting_offsets == "group:billing"
    # t/0 committed at 40; t/1 none (earliest: its log start, 5)
    start = resolve_offsets(
        "startingOffsets", parsed.starting_offsets, {"t": TOPIC}, {("t", 0): 40}
    )
    assert start == {"t": {0: 40, 1: 5}}
    # an offset retention removed since starts at the log start; a group unknown: earliest
    assert resolve_offsets("startingOffsets", "group:billing", {"t": TOPIC}, {("t", 1): 2}) == {
        "t": {0: 0, 1: 5}
    }
    assert resolve_offsets("startingOffsets", "group:billing", {"t": TOPIC}, None) == {
        "t": {0: 0, 1: 5}
    }
    for bad, match in [
        ({"startingOffsets": "group:"}, "option 'startingOffsets'='group:': group ''"),
        ({"startingOffsets": "group:a b"}, "group 'a b' is invalid"),
        ({"endingOffsets": "group:billing"}, "use it in 'startingOffsets'"),
    ]:
        with pytest.raises(SparkOptionError, match=match):
            parse_options(options(**bad))


def test_bad_options_name_the_option() -> None:
    for bad, match in [
        ({"bootstrap": ""}, "option 'bootstrap'"),
        ({"startingOffsets": "[1]"}, "option 'startingOffsets'"),
        ({"endingOffsets": '{"t": {"x": 1}}'}, "option 'endingOffsets'"),
        ({"maxRecordsPerRequest": "lots"}, "option 'maxRecordsPerRequest'"),
        ({"arrow": "maybe"}, "option 'arrow'"),
    ]:
        with pytest.raises(SparkOptionError, match=match):
            parse_options(options(**bad))
    with pytest.raises(SparkOptionError, match="option 'topics'"):
        parse_options({"bootstrap": "127.0.0.1:7001", "topics": "a,a"})
    with pytest.raises(SparkOptionError, match="option 'endingOffsets' is for batch"):
        parse_options(options(endingOffsets="latest"), streaming=True)


def test_ranges_split_cover_and_spread_replicas() -> None:
    parsed = parse_options(options(minPartitions="8"))
    start = {"t": {0: 0, 1: 5}}
    end = {"t": {0: 100, 1: 10}}
    where = {"n1": "127.0.0.1:1", "n2": "127.0.0.2:2", "n3": "127.0.0.3:3"}
    ranges = plan_ranges({"t": TOPIC}, start, end, parsed, addresses=where)
    assert len(ranges) >= 8
    assert all(r.addresses == tuple(where[m] for m in r.replicas) for r in ranges)
    for partition, (first, last) in ((0, (0, 100)), (1, (5, 10))):
        mine = [r for r in ranges if r.partition == partition]
        assert mine[0].start == first and mine[-1].end == last
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
    assert len({r.replicas[0] for r in ranges}) == 3, "tasks should start on every replica"
    assert split_range(OffsetRange("t", 0, 0, 3, ()), 10) == [
        OffsetRange("t", 0, n, n + 1, ()) for n in range(3)
    ]
    with pytest.raises(SparkOptionError, match="option 'endingOffsets': t/0 ends at 3"):
        plan_ranges({"t": TOPIC}, {"t": {0: 5, 1: 5}}, {"t": {0: 3, 1: 5}}, parsed)


def test_replica_preference_orders() -> None:
    p = TOPIC.partitions[0]
    assert replica_order(p, "leader", 1) == ("n1", "n3", "n2")
    assert replica_order(p, "followers", 0) == ("n2", "n3", "n1")
    assert {replica_order(p, "any", k)[0] for k in range(3)} == {"n1", "n2", "n3"}


def test_admission_caps_records_per_trigger() -> None:
    start = {"t": {0: 0, 1: 5}}
    latest = {"t": {0: 100, 1: 10}}
    end = admit(start, latest, 21)
    admitted = sum(end["t"][p] - start["t"][p] for p in (0, 1))
    assert admitted <= 21 and end["t"][1] > 5, end
    assert admit(start, latest, 1000) == latest


def test_a_stream_reads_partitions_added_since_its_last_batch_from_their_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A partition added (alter_topic) after a micro-batch's start offset was taken: its records
    up to the end offset belong to this batch, from its log start (as Kafka's source reads new
    partitions from earliest), and one added after the end offset waits for the next."""
    grown = TopicInfo(
        "t",
        (
            *TOPIC.partitions,
            PartitionInfo(2, "n3", ("n3", "n1", "n2"), high_watermark=7, log_start=0),
            PartitionInfo(3, "n1", ("n1", "n2", "n3"), high_watermark=4, log_start=0),
        ),
    )
    monkeypatch.setattr(spark_stream, "describe_topics", lambda *args: {"t": grown})
    reader = spark_stream.FlotillaStreamReader(parse_options(options(), streaming=True))
    start = {"t": {"0": 90, "1": 10}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 100, "1": 10, "2": 7, "3": 4}}
    end["t"].pop("3")  # as if partition 3 came after the end offset was taken
    ranges = [p.value for p in reader.partitions(start, end)]
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 90, 100), (2, 0, 7)]


def test_security_options_reach_the_clients_and_bad_ones_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("FLOTILLA_TLS_CA", "FLOTILLA_TLS_CERT", "FLOTILLA_TLS_KEY", "FLOTILLA_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    ca = init_ca(tmp_path)
    alice = issue_client(tmp_path, "alice")
    parsed = parse_options(
        options(tls_ca=str(ca.cert), TLS_CERT=str(alice.cert), tls_key=str(alice.key), token="t1")
    )
    assert (parsed.tls_ca, parsed.tls_cert, parsed.tls_key) == tuple(
        str(p) for p in (ca.cert, alice.cert, alice.key)
    )
    assert "t1" not in repr(parsed)  # the token rides to executors, not into logs
    with client_for(parsed, ["127.0.0.1:1"], 1) as client:
        credentials = client._core.credentials
        assert credentials.tls and credentials.cert == alice.cert.read_bytes()
        assert credentials.metadata == (("authorization", "Bearer t1"),)
    for bad, match in [
        ({"tls_ca": str(tmp_path / "none.pem")}, "security options: tls_ca .*no such file"),
        ({"tls_ca": str(ca.cert), "tls_cert": str(alice.cert)}, "without tls_key"),
        ({"bootstrap": "10.0.0.5:7001", "token": "t1"}, "refusing to send the token"),
    ]:
        with pytest.raises(SparkOptionError, match=match):
            parse_options(options(**bad))
