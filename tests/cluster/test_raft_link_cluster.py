"""The raw Raft link on real nodes (one cluster for the module): n1 and n2 take Raft frames on a
raft port, n3 advertises none (a node of the release before raft ports, during a rolling
upgrade), so n1 <-> n2 is a raw link both ways, while n3 is sent Raft over its gRPC port and
sends over raw links. Replication needs each path in turn; a restarted peer is re-dialled."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch


def _established(host: str, port: int) -> int:
    """Established TCP connections to host:port on this machine (/proc/net/tcp)."""
    wanted = f"{struct.unpack('<I', socket.inet_aton(host))[0]:08X}:{port:04X}"
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[2] == wanted and row[3] == "01")


class Setup:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def stub(self, node_id: str) -> flotilla_pb2_grpc.FlotillaStub:
        return flotilla_pb2_grpc.FlotillaStub(
            self.cluster.channel(self.cluster.nodes[node_id].address)
        )

    def leader(self, topic: str, via: str = "n1") -> str:
        request = pb.MetadataRequest(topics=[topic])
        try:
            response = self.stub(via).Metadata(request, timeout=5)
        except grpc.RpcError:
            return ""
        return str(response.topics[0].partitions[0].leader) if response.topics else ""

    def produce(self, topic: str, value: bytes, via: str = "n1") -> bool:
        """One acks=all record to topic/0 at its leader; False if not committed in time."""
        leader = self.leader(topic, via)
        if leader not in self.cluster.nodes or not self.cluster.is_running(leader):
            return False
        batch = encode_batch([(None, value, None, 1_700_000_000_000)])
        request = pb.ProduceRequest(topic=topic, partition=0, batch=batch)
        try:
            self.stub(leader).Produce(request, timeout=5)
        except grpc.RpcError:
            return False
        return True


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root: Path = tmp_path_factory.mktemp("raft-link")
    with LocalCluster(root, 3, raft_link=True) as cluster:
        cluster.nodes["n3"].raft_port = 0  # an earlier release: no raft port to advertise
        cluster.start()
        setup = Setup(cluster)
        setup.stub("n1").CreateTopic(
            pb.CreateTopicRequest(name="t", partitions=1, replication_factor=3), timeout=30
        )
        wait_until(lambda: setup.produce("t", b"first"), 30, "a first record committed")
        yield setup


def test_raw_links_and_the_grpc_fallback_each_carry_replication(setup: Setup) -> None:
    cluster = setup.cluster
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    # whoever leads, the leader's messages to its followers or their answers to it cross two
    # raw links (n3's answers too: it sends over raw links)
    wait_until(
        lambda: _established(n1.host, n1.raft_port) + _established(n2.host, n2.raft_port) >= 2,
        20,
        "raw links to the raft ports",
    )
    # without n2, a commit needs n1 <-> n3: raw link one way, the gRPC stream the other
    cluster.kill("n2")
    wait_until(lambda: setup.produce("t", b"without n2"), 30, "a record by n1 and n3 alone")
    cluster.start("n2")  # restarted: its peers re-dial it
    # without n3, a commit needs n1 <-> n2 again, both ways over raw links to the restarted n2
    cluster.kill("n3")
    try:
        wait_until(
            lambda: setup.produce("t", b"n1 and n2 again", "n2"), 30, "a record by n1 and n2"
        )
    finally:
        cluster.start("n3")
