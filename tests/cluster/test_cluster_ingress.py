"""What a node accepts at its edge, on a real node process: a produce whose batch body is
malformed is refused before anything is written; a flood of oversized produce requests leaves
the node's memory bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import msgpack
import pytest
from harness import batch_of_body

from cluster.local import LocalCluster
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
ROW = [b"k", b"v", [["h", b"x"]], 5]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("ingress")
    with LocalCluster(root, 1, controllers=1, config_text=CONFIG) as local:
        local.start()
        yield local


def _raw_produce(cluster: LocalCluster, request: pb.ProduceRequest) -> grpc.RpcError | None:
    with grpc.insecure_channel(cluster.nodes["n1"].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        try:
            stub.Produce(request, timeout=30)
        except grpc.RpcError as error:
            return error
    return None


POISON = [
    (msgpack.packb([ROW, [b"k", b"v", []]]), 2, "record 1 is an array of 3"),
    (msgpack.packb([ROW, [b"k", 7, [], 5]]), 2, "record 1: value is int"),
    (msgpack.packb([ROW]) + b"\xc0", 1, "1 bytes after its 1 records"),
    (b"\x92" + msgpack.packb(ROW), 2, "ends after 1 of its 2 records"),
    # what the server's one typed pass must not let through: a fifth field
    (msgpack.packb([ROW, [b"k", b"v", [], 5, 6]]), 2, "record 1 is an array of 5"),
]


@pytest.mark.parametrize(("body", "count", "named"), POISON, ids=[n for _, _, n in POISON])
def test_a_malformed_body_is_refused_and_nothing_is_written(
    single: LocalCluster, body: bytes, count: int, named: str
) -> None:
    topic = f"poison-{count}-{len(body)}"
    with Client(single.addresses(), timeout_s=30) as client:
        client.create_topic(topic, partitions=1, replication_factor=1)
        good = client.produce(topic, b"first", partition=0)  # waits for a leader
        request = pb.ProduceRequest(topic=topic, partition=0, batch=batch_of_body(body, count))
        error = _raw_produce(single, request)
        assert error is not None, f"a batch with a malformed body ({named}) was accepted"
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
        assert named in (error.details() or ""), error.details()
        after = client.produce(topic, b"second", partition=0)
        assert after.offset == good.offset + 1, "the malformed batch took offsets"
        records = client.read(topic, 0, 0, 100)  # the partition stays readable
        assert [r.value for r in records] == [b"first", b"second"]


def test_a_produce_timeout_above_the_maximum_is_refused(single: LocalCluster) -> None:
    with Client(single.addresses(), timeout_s=30) as client:
        client.create_topic("patient", partitions=1, replication_factor=1)
        client.produce("patient", b"first", partition=0)
        batch = encode_batch([(None, b"late", None, 0)])
        request = pb.ProduceRequest(topic="patient", partition=0, batch=batch, timeout_ms=3_600_000)
        error = _raw_produce(single, request)
        assert error is not None, "a produce asking to wait an hour was accepted"
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
        assert "timeout_ms=3600000 exceeds max_produce_timeout_ms=120000" in (
            error.details() or ""
        ), error.details()
        assert [r.value for r in client.read("patient", 0, 0, 10)] == [b"first"]
        request.timeout_ms = 120_000  # the maximum itself is fine
        assert _raw_produce(single, request) is None


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


FLOOD_REQUESTS = 32
FLOOD_REQUEST_MIB = 15
RSS_GROWTH_LIMIT_MIB = 512  # the flood's bytes are 480 MiB; unbounded, a node grew ~1.1 GiB


def test_a_flood_of_oversized_produce_requests_leaves_memory_bounded(tmp_path: Path) -> None:
    """32 concurrent 15 MiB produce requests (over max_batch_bytes, under the old 16 MiB gRPC
    limit), all refused: the node's RSS must not grow by anything like their size."""
    with LocalCluster(tmp_path, 1, controllers=1, config_text=CONFIG) as cluster:
        cluster.start()
        spec = cluster.nodes["n1"]
        assert spec.process is not None
        pid = spec.process.pid
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("flood", partitions=1, replication_factor=1)
            client.produce("flood", b"warm", partition=0)
        baseline = _rss_mib(pid)
        batch = encode_batch([(None, b"x" * (FLOOD_REQUEST_MIB * 2**20 - 100), None, 0)])
        peak = baseline
        watching = threading.Event()

        def watch() -> None:
            nonlocal peak
            while not watching.is_set():
                peak = max(peak, _rss_mib(pid))
                watching.wait(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        options = [("grpc.max_send_message_length", 64 * 2**20)]
        channels = [grpc.insecure_channel(spec.address, options=options) for _ in range(4)]
        try:
            request = pb.ProduceRequest(topic="flood", partition=0, batch=batch)
            calls = [
                flotilla_pb2_grpc.FlotillaStub(channels[n % 4]).Produce.future(request, timeout=60)
                for n in range(FLOOD_REQUESTS)
            ]
            codes = []
            for call in calls:
                try:
                    call.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as error:
                    codes.append(error.code())
        finally:
            watching.set()
            watcher.join()
            for channel in channels:
                channel.close()
        after = _rss_mib(pid)
        print(f"RSS MiB: baseline {baseline}, peak {peak}, after {after}")
        assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * FLOOD_REQUESTS, codes
        assert peak - baseline < RSS_GROWTH_LIMIT_MIB, (baseline, peak, after)
        with Client(cluster.addresses(), timeout_s=30) as client:
            assert client.produce("flood", b"still serving", partition=0).offset == 1
