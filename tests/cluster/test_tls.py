"""TLS on real nodes (one mutual-TLS cluster for the module, `LocalCluster(tls=True)`).

A TLS cluster elects, takes writes and replicates them; a caller without a certificate the
cluster's CA signed (none, plaintext, another CA's) cannot call at all; and a node's certificate
is rotated without a restart, on SIGHUP or by the file check alone: new connections see the new
certificate's serial, and the cluster keeps working across it.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from harness import free_port, wait_until

from cluster import healthcheck
from cluster.certs import init_ca, issue_client, issue_node
from cluster.local import LocalCluster
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch


@dataclass
class Setup:
    cluster: LocalCluster

    def stub(self, node_id: str) -> flotilla_pb2_grpc.FlotillaStub:
        return flotilla_pb2_grpc.FlotillaStub(
            self.cluster.channel(self.cluster.nodes[node_id].address)
        )

    def leader(self, topic: str) -> str:
        response = self.stub("n1").Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
        return str(response.topics[0].partitions[0].leader)

    def produce_everywhere(self, topic: str, value: bytes) -> int:
        """Produces one record to `topic`/0 at its leader; waits until every replica has it
        (each answers a read of it); returns its offset."""
        wait_until(lambda: self.leader(topic) != "", 30, f"a leader of {topic}/0")
        batch = encode_batch([(None, value, None, 1_700_000_000_000)])
        request = pb.ProduceRequest(topic=topic, partition=0, batch=batch)
        offset = int(self.stub(self.leader(topic)).Produce(request, timeout=30).base_offset)

        def replicated() -> bool:
            for node_id in self.cluster.nodes:
                try:
                    response = self.stub(node_id).Metadata(
                        pb.MetadataRequest(topics=[topic], local_only=True), timeout=10
                    )
                except grpc.RpcError as error:  # this node has not learned the topic yet
                    if error.code() is grpc.StatusCode.NOT_FOUND:
                        return False
                    raise
                partitions = response.topics[0].partitions if response.topics else []
                if not partitions or partitions[0].high_watermark <= offset:
                    return False
            return True

        wait_until(replicated, 30, f"offset {offset} of {topic}/0 on every replica")
        return offset


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with LocalCluster(tmp_path_factory.mktemp("tls"), 3, tls=True) as cluster:
        cluster.start()
        yield Setup(cluster)


def test_a_tls_cluster_elects_produces_and_replicates(setup: Setup) -> None:
    setup.stub("n1").CreateTopic(
        pb.CreateTopicRequest(name="t", partitions=1, replication_factor=3), timeout=30
    )
    assert setup.produce_everywhere("t", b"first") == 0
    fetched = setup.stub(setup.leader("t")).Fetch(pb.FetchRequest(topic="t", partition=0))
    assert [b.record_count for b in fetched.batches] == [1]
    assert setup.stub("n2").Health(pb.HealthRequest(), timeout=5).members_alive == 3


def _health_code(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = (
        grpc.insecure_channel(address)
        if credentials is None
        else grpc.secure_channel(address, credentials)
    )
    with channel:
        try:
            flotilla_pb2_grpc.FlotillaStub(channel).Health(pb.HealthRequest(), timeout=5)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def test_a_caller_without_a_certificate_of_the_cluster_cannot_call(
    setup: Setup, tmp_path: Path
) -> None:
    address = setup.cluster.nodes["n1"].address
    tls = setup.cluster.tls
    assert tls is not None
    ca = tls.ca.read_bytes()
    init_ca(tmp_path)  # another CA, and a client certificate of it
    stranger = issue_client(tmp_path, "admin")
    refused = {
        "plaintext": None,
        "no certificate": grpc.ssl_channel_credentials(ca),
        "another CA's certificate": grpc.ssl_channel_credentials(
            ca, stranger.key.read_bytes(), stranger.cert.read_bytes()
        ),
    }
    for what, credentials in refused.items():
        assert _health_code(address, credentials) is grpc.StatusCode.UNAVAILABLE, what
    admin = grpc.ssl_channel_credentials(ca, tls.key.read_bytes(), tls.cert.read_bytes())
    assert _health_code(address, admin) is grpc.StatusCode.OK


def _served_serial(setup: Setup, node_id: str) -> int:
    """The serial of the certificate node `node_id` presents to a new connection."""
    spec = setup.cluster.nodes[node_id]
    tls = setup.cluster.tls
    assert tls is not None
    context = ssl.create_default_context(cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((spec.host, spec.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=spec.host) as connection,
    ):
        der = connection.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def _file_serial(path: Path) -> int:
    return int(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)


def test_certificates_rotate_without_a_restart(setup: Setup) -> None:
    cluster = setup.cluster
    assert cluster.tls_dir is not None
    setup.stub("n1").CreateTopic(
        pb.CreateTopicRequest(name="rotated", partitions=1, replication_factor=3), timeout=30
    )
    setup.produce_everywhere("rotated", b"before")
    pids = {n: spec.process.pid for n, spec in cluster.nodes.items() if spec.process is not None}
    for node_id, how in (("n1", "sighup"), ("n2", "file check")):
        spec = cluster.nodes[node_id]
        old = _served_serial(setup, node_id)
        new = _file_serial(issue_node(cluster.tls_dir, node_id, hosts=(spec.host,)).cert)
        assert new != old
        if how == "sighup":
            assert spec.process is not None
            os.killpg(spec.process.pid, signal.SIGHUP)
        wait_until(
            lambda node_id=node_id, new=new: _served_serial(setup, node_id) == new,  # type: ignore[misc]
            20,
            f"{node_id} serving its new certificate ({how})",
        )
    # the cluster keeps working: the rotated nodes' peers and clients reconnect with the new
    # certificates, and the rotated nodes dial with theirs
    assert setup.produce_everywhere("rotated", b"after") == 1
    assert {n: s.process.pid for n, s in cluster.nodes.items() if s.process} == pids
    for node_id in ("n1", "n2"):
        log_path = cluster.nodes[node_id].log_path
        assert log_path is not None and "event=tls_reloaded" in log_path.read_text()


def test_the_container_healthcheck_speaks_tls(setup: Setup) -> None:
    """`python -m cluster.healthcheck` in a node's container connects with the node's own files
    (its FLOTILLA_TLS_* settings): healthy; plaintext to a TLS port is not."""
    spec = setup.cluster.nodes["n3"]
    paths = setup.cluster.node_tls("n3")
    assert paths is not None
    healthy, reason = healthcheck.check(
        spec.address, tls=(str(paths.ca), str(paths.cert), str(paths.key))
    )
    assert healthy, reason
    healthy, reason = healthcheck.check(spec.address)
    assert not healthy and "UNAVAILABLE" in reason
    env = {
        **os.environ,
        "FLOTILLA_TLS_CA": str(paths.ca),
        "FLOTILLA_TLS_CERT": str(paths.cert),
        "FLOTILLA_TLS_KEY": str(paths.key),
    }
    result = subprocess.run(
        [sys.executable, "-m", "cluster.healthcheck", spec.address],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_tls_without_client_certificates_peers_prove_themselves_by_the_secret(
    tmp_path: Path,
) -> None:
    """`--tls-client-auth off`: clients connect with the CA alone (they would bring a token);
    the nodes still elect and replicate, proving themselves by the cluster secret."""
    # authorization "auto" is on with TLS, and these clients bring no token: off, to test the
    # transport alone (tests/cluster/test_acls.py tests tokens and ACLs)
    env = {"FLOTILLA_AUTHORIZATION": "off"}
    args = ["--tls-client-auth", "off"]
    with LocalCluster(tmp_path, 2, tls=True, node_args=args, env=env) as cluster:
        cluster.start()
        tls = cluster.tls
        assert tls is not None
        address = cluster.nodes["n1"].address
        assert _health_code(address, grpc.ssl_channel_credentials(tls.ca.read_bytes())) is (
            grpc.StatusCode.OK
        )
        assert _health_code(address, None) is grpc.StatusCode.UNAVAILABLE  # still TLS
        setup = Setup(cluster)
        setup.stub("n1").CreateTopic(
            pb.CreateTopicRequest(name="t", partitions=1, replication_factor=2), timeout=30
        )
        assert setup.produce_everywhere("t", b"x") == 0


def _run_node(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLOTILLA_CLUSTER_SECRET": "s3cret"}
    command = [sys.executable, "-m", "flotilla", "node", "--data-dir", str(tmp_path / "d"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_bad_tls_files_and_a_public_address_without_tls_refuse_to_start(tmp_path: Path) -> None:
    init_ca(tmp_path / "certs")
    n1 = issue_node(tmp_path / "certs", "n1")
    n2 = issue_node(tmp_path / "certs", "n2")
    listen = f"127.0.0.1:{free_port()}"
    mismatched = ["--tls-ca", str(n1.ca), "--tls-cert", str(n1.cert), "--tls-key", str(n2.key)]
    result = _run_node(["--id", "n1", "--listen", listen, *mismatched], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "tls_key=" in result.stderr and "is not the key of tls_cert=" in result.stderr
    assert "Traceback" not in result.stderr
    result = _run_node(["--id", "n1", "--listen", f"0.0.0.0:{free_port()}"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "without TLS" in result.stderr and "--insecure" in result.stderr


def test_insecure_warns_at_every_start(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, node_args=["--insecure"]) as cluster:
        cluster.start()
        log_path = cluster.nodes["n1"].log_path
        assert log_path is not None
        wait_until(lambda: "event=insecure" in log_path.read_text(), 10, "the warning")
        line = next(x for x in log_path.read_text().splitlines() if "event=insecure" in x)
        assert "level=warning" in line
