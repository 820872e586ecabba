"""The SDK on real nodes: sync and asyncio clients, the batching producer, partitioning, errors."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import xxhash
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import (
    Client,
    InvalidArgument,
    OffsetOutOfRange,
    TopicNotFound,
)
from flotilla import aio as flotilla_aio
from flotilla.producer import MAX_BATCH_BYTES
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

pytestmark = pytest.mark.integration
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("sdk"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


def test_sync_client_round_trip_keys_headers_and_partitioning(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("sync", partitions=4, replication_factor=3)
        meta = client.produce("sync", b"v1", key=b"user-7", headers=[("h", b"x")])
        assert meta.partition == xxhash.xxh64_intdigest(b"user-7") % 4
        again = client.produce("sync", b"v2", key=b"user-7")
        assert again.partition == meta.partition and again.offset == meta.offset + 1
        records = client.read("sync", meta.partition, meta.offset)
        assert [(r.key, r.value, r.headers) for r in records] == [
            (b"user-7", b"v1", (("h", b"x"),)),
            (b"user-7", b"v2", ()),
        ]
        batch = client.produce_batch("sync", [b"a", b"b", b"c"], partition=2)
        assert [m.offset for m in batch] == [batch[0].offset + n for n in range(3)]
        unkeyed = {client.produce_batch("sync", [b"x"])[0].partition for _ in range(8)}
        assert len(unkeyed) > 1, "unkeyed batches should round-robin across partitions"
        assert "sync" in client.list_topics()
        assert {m.id for m in client.members()} == {"n1", "n2", "n3"}
        info = client.describe_topic("sync")
        assert len(info.partitions) == 4 and all(len(p.replicas) == 3 for p in info.partitions)


def test_batching_producer_keeps_per_partition_order(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("batched", partitions=2, replication_factor=3)
        with client.producer(linger_ms=2, batch_bytes=4096) as producer:
            futures = [
                producer.send("batched", f"{n}".encode(), key=f"k{n % 3}".encode())
                for n in range(600)
            ]
            producer.flush()
            metas = [f.result(timeout=30) for f in futures]
        for partition in (0, 1):
            mine = [(m.offset, n) for n, m in enumerate(metas) if m.partition == partition]
            values = [int(r.value) for r in client.read("batched", partition, 0, 10_000)]
            assert values == [n for _, n in sorted(mine)]
            assert values == sorted(values)


def test_batches_behind_one_refused_for_good_go_on_without_it(cluster: LocalCluster) -> None:
    """A batch refused for good (too large) was written nowhere: the batches pipelined behind
    it go on under the sequences they need (a new producer id from 0, no gap for the leader to
    wait on), each written once, in the order sent; only the refused one fails (before, every
    batch in flight behind it failed with "failed for good"). (The SDK refuses a record over
    the max_batch_bytes the nodes report before sending it; here the client's view is stale,
    as when a node was reconfigured lower since the client heard it.)"""
    with Client(cluster.bootstrap, timeout_s=20) as client:
        client.create_topic("gapped", partitions=1, replication_factor=3)
        with client.producer(linger_ms=1, batch_bytes=1024) as producer:
            producer.send("gapped", b"x" * 2000).result(timeout=30)  # the partition is proven
            client.router.max_batch_bytes = 8 << 20  # a stale view: the nodes accept 4 MiB
            huge = producer.send("gapped", b"y" * (5 << 20))  # over the node's max_batch_bytes
            behind = [producer.send("gapped", b"z%d" % n + b"." * 1500) for n in range(6)]
            # refused by the node's handler or, this far over, by gRPC's request limit before
            # it is read (cluster.ingress)
            with pytest.raises(InvalidArgument, match=r"exceeds max_batch_bytes|larger than max"):
                huge.result(timeout=30)
            outcomes = [f.exception(timeout=30) for f in behind]
            assert outcomes == [None] * 6, outcomes
            assert [f.result(0).offset for f in behind] == list(range(1, 7))
        values = [r.value for r in client.read("gapped", 0, 0, 100)]
        assert values == [b"x" * 2000, *(b"z%d" % n + b"." * 1500 for n in range(6))]
        assert producer_writes_again(client)


def test_the_largest_batches_a_producer_makes_are_accepted(cluster: LocalCluster) -> None:
    """A batch is closed before a record would overfill it, so even at the largest batch_bytes
    no batch passes a node's max_batch_bytes (closing after the record went in made one of
    4,100 KiB here, which the node refused)."""
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("big-batches", partitions=1, replication_factor=3)
        with client.producer(linger_ms=50, batch_bytes=MAX_BATCH_BYTES) as producer:
            futures = [producer.send("big-batches", b"r" * (100 << 10)) for _ in range(90)]
            offsets = [f.result(timeout=60).offset for f in futures]
        assert offsets == list(range(90))


def test_batches_stay_within_the_smallest_max_batch_bytes_the_nodes_report(
    tmp_path: Path,
) -> None:
    """A node configured below the default max_batch_bytes says so in metadata; a producer
    aiming at bigger batches makes them no bigger than that (else the node refuses them)."""
    limit = 64 * 1024
    config = f"{CONFIG}max_batch_bytes = {limit}\n"
    with LocalCluster(tmp_path, 1, config_text=config) as local:
        local.start()
        with Client(local.bootstrap, timeout_s=30) as client:
            client.create_topic("small-batches", partitions=1, replication_factor=1)
            assert client.router.max_batch_bytes == limit
            with client.producer(linger_ms=200, batch_bytes=1 << 20) as producer:
                futures = [
                    producer.send("small-batches", b"r" * 1000, headers=[("n", b"%d" % n)])
                    for n in range(300)
                ]
                offsets = [f.result(timeout=60).offset for f in futures]
            assert offsets == list(range(300))
            records = client.read("small-batches", 0, 0, max_records=1000)
            assert [r.headers for r in records[:2]] == [(("n", b"0"),), (("n", b"1"),)]


def producer_writes_again(client: Client) -> bool:
    with client.producer(linger_ms=1) as producer:
        return bool(producer.send("gapped", b"after").result(timeout=30).offset >= 1)


def test_reads_spread_and_pin_replicas(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("pinned", partitions=1, replication_factor=3)
        client.produce("pinned", b"one", partition=0)
        for replica in ("n1", "n2", "n3"):
            deadline_records: list[bytes] = []
            for _ in range(100):
                deadline_records = [r.value for r in client.read("pinned", 0, 0, replica=replica)]
                if deadline_records:
                    break
            assert deadline_records == [b"one"]
        with pytest.raises(InvalidArgument, match="not a known member"):
            client.read("pinned", 0, 0, replica="n9")


def test_a_client_reads_its_own_writes_on_every_replica(cluster: LocalCluster) -> None:
    """Followers learn a commit up to a tick after the leader acknowledges it; a client's reads
    carry the end of its own acknowledged writes, and a replica behind it waits to catch up."""
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("ryw", partitions=1, replication_factor=3)
        for n in range(15):
            meta = client.produce("ryw", f"v{n}".encode(), partition=0)
            for replica in ("n1", "n2", "n3"):
                records = client.read("ryw", 0, meta.offset, replica=replica)
                assert [r.value for r in records] == [f"v{n}".encode()], (n, replica)
            assert client.read("ryw", 0, meta.offset)[0].value == f"v{n}".encode()


def test_the_read_your_writes_check_sees_followers_lag_without_it(cluster: LocalCluster) -> None:
    """The checker above can fail: the same reads without `min_high_watermark` find a
    follower that has not yet learnt the commit of a write just acknowledged."""
    with Client(cluster.bootstrap, timeout_s=30) as client:
        client.create_topic("lag", partitions=1, replication_factor=3)
        leader = _wait_leader(client, "lag")
        followers = [cluster.nodes[n].address for n in ("n1", "n2", "n3") if n != leader]
        channels = [grpc.insecure_channel(address) for address in followers]
        try:
            stubs = [flotilla_pb2_grpc.FlotillaStub(channel) for channel in channels]
            for stub in stubs:  # a node that is not a controller learns a new topic by polling
                wait_until(functools.partial(_knows, stub, "lag"), 30, "the followers know lag")
                # and a follower may open its replica after the other two elected a leader
                wait_until(functools.partial(_hosts, stub, "lag"), 30, "the followers host lag/0")
            lagging = 0
            for n in range(15):
                meta = client.produce("lag", f"v{n}".encode(), partition=0)
                for stub in stubs:
                    request = pb.FetchRequest(topic="lag", partition=0, offset=0)
                    response = stub.Fetch(request, timeout=10)
                    lagging += response.high_watermark <= meta.offset
            assert lagging > 0
        finally:
            for channel in channels:
                channel.close()


def _hosts(stub: flotilla_pb2_grpc.FlotillaStub, topic: str) -> bool:
    try:
        stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=0), timeout=10)
    except grpc.RpcError as error:
        if error.code() is grpc.StatusCode.FAILED_PRECONDITION:
            return False  # "holds no replica" yet
        raise
    return True


def _knows(stub: flotilla_pb2_grpc.FlotillaStub, topic: str) -> bool:
    try:
        stub.Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
    except grpc.RpcError as error:
        if error.code() is grpc.StatusCode.NOT_FOUND:
            return False
        raise
    return True


def _wait_leader(client: Client, topic: str) -> str:
    found: list[str] = []

    def has_leader() -> bool:
        try:
            leader = client.describe_topic(topic).partitions[0].leader
        except TopicNotFound:  # a node whose metadata lags the creation
            return False
        found.extend([leader] if leader else [])
        return bool(leader)

    wait_until(has_leader, 30, f"a leader of {topic}/0")
    return found[-1]


def test_errors_are_actionable(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, timeout_s=10) as client:
        with pytest.raises(TopicNotFound, match="topic 'missing' does not exist"):
            client.produce("missing", b"v")
        client.create_topic("errs", partitions=1, replication_factor=1)
        with pytest.raises(OffsetOutOfRange, match="valid offsets are"):
            client.read("errs", 0, offset=42)
        with pytest.raises(InvalidArgument, match="value must be bytes"):
            client.produce("errs", "text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="key must be bytes, not str"):
            client.produce("errs", b"v", key="text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=r"header \('h', 'x'\) is invalid"):
            client.produce("errs", b"v", headers=[("h", "x")])  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match="headers must be a sequence"):
            client.produce("errs", b"v", headers={"h": b"x"})  # type: ignore[arg-type]
        with client.producer(linger_ms=1) as producer:
            with pytest.raises(InvalidArgument, match=r"header \(1, b'x'\) is invalid"):
                producer.send("errs", b"v", headers=[(1, b"x")])  # type: ignore[list-item]
            with pytest.raises(InvalidArgument, match="key must be bytes, not int"):
                producer.send("errs", b"v", key=7)  # type: ignore[arg-type]
            # nothing of the bad ones was written: the first good record is offset 0
            assert producer.send("errs", b"good").result(timeout=30).offset == 0
        with pytest.raises(InvalidArgument, match="acks="):
            Client(cluster.bootstrap, acks="some")
        # a batch target no node accepts fails when the producer is made, not at every send
        with pytest.raises(InvalidArgument, match=r"batch_bytes=8388608.*batch_bytes <= 4128768"):
            client.producer(batch_bytes=8 << 20)


def test_asyncio_client_has_the_same_calls(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        async with flotilla_aio.Client(cluster.addresses(), timeout_s=30) as client:
            await client.create_topic("async", partitions=2, replication_factor=3)
            meta = await client.produce("async", b"hello", key=b"k")
            batch = await client.produce_batch("async", [b"a", b"b"], partition=meta.partition)
            records = await client.read("async", meta.partition, meta.offset)
            assert [r.value for r in records] == [b"hello", b"a", b"b"]
            assert batch[1].offset == meta.offset + 2
            assert "async" in await client.list_topics()
            followed = []
            async for record in client.subscribe("async", meta.partition, meta.offset):
                followed.append(record.value)
                if len(followed) == 3:
                    break
            assert followed == [b"hello", b"a", b"b"]
            with pytest.raises(TopicNotFound):
                await client.produce("nope", b"v")
            altered = await client.alter_topic("async", retention_bytes=1 << 30)
            assert (altered.retention_bytes, altered.retention_ms) == (1 << 30, 0)
            with pytest.raises(InvalidArgument, match="key must be bytes"):
                await client.produce("async", b"v", key="k")  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_cli_produce_pipes_into_consume(cluster: LocalCluster) -> None:
    env = {**os.environ, "FLOTILLA_BOOTSTRAP": cluster.bootstrap}
    cli = [sys.executable, "-m", "flotilla"]
    subprocess.run(
        [*cli, "topic", "create", "piped", "--partitions", "1"],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    lines = "".join(f"line {n}\n" for n in range(50)).encode()
    produced = subprocess.run(
        [*cli, "produce", "piped"],
        input=lines,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert produced.stdout.decode().splitlines() == [f"0 {n}" for n in range(50)]
    consumed = subprocess.run(
        [*cli, "consume", "piped", "--partition", "0", "--from-beginning", "--max", "50"],
        env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert consumed.stdout == lines
    status = subprocess.run(
        [*cli, "status", "--json"], env=env, check=True, capture_output=True, timeout=60
    )
    assert b'"topic": "piped"' in status.stdout
    bad = subprocess.run(
        [*cli, "topic", "create", "a/b"], env=env, capture_output=True, timeout=60, check=False
    )
    assert bad.returncode == 1 and b"topic name 'a/b' is invalid" in bad.stderr
    altered = subprocess.run(
        [*cli, "topic", "alter", "piped", "--retention-ms", "86400000"],
        env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert b"retention ms 86400000" in altered.stdout


def test_the_demo_runs_and_leaves_no_process_behind(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "flotilla", "demo", "--count", "3000"],
        env=env, capture_output=True, timeout=240, cwd=ROOT, check=False,
    )  # fmt: skip
    output = result.stdout.decode()
    assert result.returncode == 0, output + result.stderr.decode()
    assert "demo complete" in output and "read back 3,000 records" in output
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert leftovers.stdout.strip() == "", f"processes left behind: {leftovers.stdout}"
