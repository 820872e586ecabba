"""What a node accepts at its edge, on a real node process: a produce whose batch body is
malformed is refused before anything is written."""

from __future__ import annotations

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
