"""Peers prove they belong, on real nodes with mutual TLS (one cluster for the module).

A process that can reach a node's port sends what would make it vote, truncate or declare a
member dead: Raft frames (a vote request with a huge term and a transfer flag that overrides the
leader's lease, an AppendEntries from index 1 that would replace the log) and SWIM "dead" packets
about a live member. It holds a valid CLIENT certificate and the wrong secret; or the right secret
but a client certificate; or node n2's own certificate and secret but frames claiming n3. Each
is refused UNAUTHENTICATED, nothing changes (no node ever at the forged term, no member declared
dead, every member alive, the data readable), and `flotilla_peer_auth_rejected_total` counts them.
An ordinary election is not a sign of the attack: on a loaded machine one may happen anyway.

Membership: a node with the previous secret (a rotation under way) joins; a node with a wrong
secret never becomes a member; a node without a secret refuses to start.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from harness import free_port, holds_throughout, wait_until

from cluster.frames import encode_frame
from cluster.local import LocalCluster
from cluster.peer_auth import PEER_KEY, PeerAuth
from membership.codec import encode as encode_swim
from membership.messages import Ping
from membership.types import Dead
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc, peer_pb2, peer_pb2_grpc
from proto.records import encode_batch
from raft.codec import encode_message
from raft.types import AppendRequest, Entry, EntryKind, VoteRequest

SECRET = "the-cluster-secret"
PREVIOUS = "the-secret-before"
HUGE_TERM = 10**6
RECORDS = [(b"k%d" % i, b"value-%d" % i, None, 1_700_000_000_000 + i) for i in range(5)]


@dataclass
class Setup:
    cluster: LocalCluster
    metrics: dict[str, str]  # node id -> host:port
    leader: str
    high_watermark: int

    def scrape(self, node_id: str) -> str:
        with urllib.request.urlopen(f"http://{self.metrics[node_id]}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def counter(self, node_id: str, name: str, **labels: str) -> float:
        total = 0.0
        for line in self.scrape(node_id).splitlines():
            if not line.startswith(name + "{"):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stub(self, node_id: str) -> flotilla_pb2_grpc.FlotillaStub:
        return flotilla_pb2_grpc.FlotillaStub(
            self.cluster.channel(self.cluster.nodes[node_id].address)
        )

    def leader_of_t0(self) -> str:
        response = self.stub("n1").Metadata(pb.MetadataRequest(topics=["t"]), timeout=10)
        return str(response.topics[0].partitions[0].leader)

    def rejected(self, node_id: str, kind: str) -> float:
        return self.counter(node_id, "flotilla_peer_auth_rejected_total", kind=kind)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("peer-auth")
    env = {"FLOTILLA_CLUSTER_SECRET": SECRET, "FLOTILLA_CLUSTER_SECRET_PREVIOUS": PREVIOUS}
    with LocalCluster(root, 3, tls=True, env=env) as cluster:
        metrics = {}
        for spec in cluster.nodes.values():
            metrics[spec.node_id] = f"{spec.host}:{free_port(spec.host)}"
            spec.extra_args = ["--metrics", metrics[spec.node_id]]
        cluster.start()
        with cluster.channel(cluster.bootstrap) as channel:
            flotilla_pb2_grpc.FlotillaStub(channel).CreateTopic(
                pb.CreateTopicRequest(name="t", partitions=1, replication_factor=3), timeout=30
            )
        setup = Setup(cluster, metrics, "", len(RECORDS))
        wait_until(lambda: setup.leader_of_t0() != "", 30, "a leader of t/0")
        setup.leader = setup.leader_of_t0()
        produced = setup.stub(setup.leader).Produce(
            pb.ProduceRequest(topic="t", partition=0, batch=encode_batch(RECORDS)), timeout=30
        )
        assert produced.base_offset == 0
        wait_until(
            lambda: all(
                setup.counter(n, "flotilla_partition_high_watermark", topic="t") == len(RECORDS)
                for n in ("n1", "n2", "n3")
            ),
            30,
            "every replica of t/0 at the high watermark",
        )
        yield setup


def _credentials(setup: Setup, name: str) -> grpc.ChannelCredentials:
    directory = setup.cluster.tls_dir
    assert directory is not None
    return grpc.ssl_channel_credentials(
        (directory / "ca.pem").read_bytes(),
        (directory / f"{name}.key").read_bytes(),
        (directory / f"{name}.pem").read_bytes(),
    )


def _raft_frames(claimed: str, target: str) -> list[bytes]:
    """What would make `target` vote and truncate: a vote request with a huge term that
    overrides the lease, then an AppendEntries from index 1 at that term."""
    vote = VoteRequest(HUGE_TERM, claimed, target, 10**9, HUGE_TERM, transfer=True)
    entry = Entry(1, HUGE_TERM, EntryKind.NOOP, 0, b"")
    append = AppendRequest(HUGE_TERM, claimed, target, 0, 0, 0, (entry,))
    payloads = [encode_message(vote), encode_message(append)]
    return [
        encode_frame(sequence, claimed, target, [(b"t/0", [payload], len(payload))])
        for sequence, payload in enumerate(payloads, start=1)
    ]


def _send_raft(
    setup: Setup, target: str, certificate: str, proof: str | None, frames: list[bytes]
) -> grpc.StatusCode | None:
    """Sends `frames` on a Raft stream to `target`; the status it ended with (None: OK)."""
    address = setup.cluster.nodes[target].address
    metadata = [(PEER_KEY, proof)] if proof is not None else []
    with grpc.secure_channel(address, _credentials(setup, certificate)) as channel:
        call = channel.stream_stream(
            "/flotilla.v1.Peer/Raft", response_deserializer=peer_pb2.RaftAck.FromString
        )
        try:
            for _ in call(iter(frames), metadata=metadata, timeout=10):
                pass
        except grpc.RpcError as error:
            return error.code()
    return None


def _send_swim(
    setup: Setup, target: str, certificate: str, auth: PeerAuth | None, claimed: str, victim: str
) -> grpc.StatusCode | None:
    ping = Ping(
        claimed, setup.cluster.nodes[claimed].address, 1, "nobody", (Dead(victim, 10**6, claimed),)
    )
    packet = peer_pb2.SwimPacket(
        from_node=claimed,
        from_address=setup.cluster.nodes[claimed].address,
        payload=encode_swim(ping),
    )
    if auth is not None:
        auth.sign_swim(packet)
    address = setup.cluster.nodes[target].address
    with grpc.secure_channel(address, _credentials(setup, certificate)) as channel:
        try:
            peer_pb2_grpc.PeerStub(channel).Swim(packet, timeout=10)
        except grpc.RpcError as error:
            return error.code()
    return None


def _log_marks(setup: Setup) -> dict[str, int]:
    """Where each node's log ends now: what a check reads from."""
    marks = {}
    for node_id in ("n1", "n2", "n3"):
        path = setup.cluster.nodes[node_id].log_path
        assert path is not None
        marks[node_id] = path.stat().st_size
    return marks


def _logged_since(setup: Setup, marks: dict[str, int]) -> dict[str, str]:
    logged = {}
    for node_id, mark in marks.items():
        path = setup.cluster.nodes[node_id].log_path
        assert path is not None
        with path.open("rb") as f:
            f.seek(mark)
            logged[node_id] = f.read().decode(errors="replace")
    return logged


def _signs_of_the_attack(setup: Setup, marks: dict[str, int]) -> list[str]:
    """What the forged messages would have caused, as the nodes logged it since `marks`: an
    election at the forged term or above (a vote granted, or a log replaced, puts a node
    there), or a member declared dead. An ordinary election on a loaded machine is no sign."""
    signs = []
    for node_id, text in _logged_since(setup, marks).items():
        for line in text.splitlines():
            term = re.search(r"\bterm=(\d+)", line)
            if (
                term is not None and int(term.group(1)) >= HUGE_TERM
            ) or "event=member_dead" in line:
                signs.append(f"{node_id}: {line}")
    return signs


def _nothing_changed(setup: Setup, marks: dict[str, int]) -> None:
    """No node at the forged term, no member declared dead, every member alive everywhere, the
    data intact: watched over a few election timeouts."""

    def members_alive() -> dict[str, int]:
        return {
            node_id: setup.stub(node_id).Health(pb.HealthRequest(), timeout=5).members_alive
            for node_id in ("n1", "n2", "n3")
        }

    def same() -> bool:
        return not _signs_of_the_attack(setup, marks) and set(members_alive().values()) == {3}

    def seen() -> str:
        return f"signs {_signs_of_the_attack(setup, marks)}, members alive {members_alive()}"

    holds_throughout(same, 2.5, "no forged term, no member dead, every member alive", seen)
    leader = setup.leader_of_t0()
    wait_until(lambda: setup.leader_of_t0() != "", 30, "a leader of t/0")
    fetched = setup.stub(setup.leader_of_t0()).Fetch(
        pb.FetchRequest(topic="t", partition=0), timeout=10
    )
    assert fetched.high_watermark == setup.high_watermark, leader
    assert sum(b.record_count for b in fetched.batches) == len(RECORDS)


def _others(setup: Setup) -> tuple[str, str]:
    a, b = sorted(n for n in ("n1", "n2", "n3") if n != setup.leader)
    return a, b


def test_a_client_certificate_with_the_wrong_secret_cannot_send_raft(setup: Setup) -> None:
    follower, _ = _others(setup)
    marks, rejected = _log_marks(setup), setup.rejected(setup.leader, "raft")
    forger = PeerAuth(follower, "not-the-secret")
    # a client certificate; then the follower's own node certificate (stolen) without the secret
    attempts = [
        (cert, proof)
        for cert in ("admin", follower)
        for proof in (forger.sign_call(), None, "n2.1.zz")
    ]
    for certificate, proof in attempts:
        frames = _raft_frames(follower, setup.leader)
        code = _send_raft(setup, setup.leader, certificate, proof, frames)
        assert code is grpc.StatusCode.UNAUTHENTICATED, (certificate, proof)
    wait_until(lambda: setup.rejected(setup.leader, "raft") >= rejected + 6, 10, "6 rejections")
    _nothing_changed(setup, marks)


def test_the_right_secret_with_a_client_certificate_cannot_send_raft(setup: Setup) -> None:
    """Mutual TLS: the secret alone does not make a node; its certificate must name it."""
    follower, _ = _others(setup)
    marks, rejected = _log_marks(setup), setup.rejected(setup.leader, "raft")
    proof = PeerAuth(follower, SECRET).sign_call()
    code = _send_raft(setup, setup.leader, "admin", proof, _raft_frames(follower, setup.leader))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    wait_until(lambda: setup.rejected(setup.leader, "raft") > rejected, 10, "the rejection counted")
    _nothing_changed(setup, marks)


def test_a_node_cannot_send_frames_claiming_another(setup: Setup) -> None:
    """n's own certificate and secret, frames claiming another node: the stream ends at the
    first such frame and none of it is delivered."""
    speaker, claimed = _others(setup)
    marks, rejected = _log_marks(setup), setup.rejected(setup.leader, "raft")
    proof = PeerAuth(speaker, SECRET).sign_call()
    code = _send_raft(setup, setup.leader, speaker, proof, _raft_frames(claimed, setup.leader))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    wait_until(lambda: setup.rejected(setup.leader, "raft") > rejected, 10, "the rejection counted")
    _nothing_changed(setup, marks)


def test_forged_swim_dead_packets_change_nothing(setup: Setup) -> None:
    target, victim = _others(setup)
    marks, rejected = _log_marks(setup), setup.rejected(target, "swim")
    cases = [
        ("admin", None),  # no mac
        ("admin", PeerAuth(setup.leader, "not-the-secret")),  # the wrong secret
        ("admin", PeerAuth(setup.leader, SECRET)),  # the right secret, a client certificate
        (setup.leader, None),  # the claimed node's own certificate (stolen), no mac
        (setup.leader, PeerAuth(setup.leader, "not-the-secret")),  # ... and the wrong secret
    ]
    for certificate, auth in cases:
        code = _send_swim(setup, target, certificate, auth, setup.leader, victim)
        assert code is grpc.StatusCode.UNAUTHENTICATED, certificate
    wait_until(lambda: setup.rejected(target, "swim") >= rejected + 5, 10, "5 swim rejections")
    _nothing_changed(setup, marks)


def test_a_rejection_is_logged_once_per_source(setup: Setup) -> None:
    path = setup.cluster.nodes[setup.leader].log_path
    assert path is not None
    wait_until(lambda: "event=peer_auth_rejected" in path.read_text(), 10, "the rejection logged")
    lines = [line for line in path.read_text().splitlines() if "event=peer_auth_rejected" in line]
    sources = [re.search(r"source=(\S+)", line).group(1) for line in lines]  # type: ignore[union-attr]
    assert len(sources) == len(set(sources)), lines


def test_previous_secret_joins_wrong_secret_never_does(setup: Setup) -> None:
    cluster = setup.cluster
    rotated = cluster.add_spec(4)
    rotated.env = {"FLOTILLA_CLUSTER_SECRET": PREVIOUS, "FLOTILLA_CLUSTER_SECRET_PREVIOUS": SECRET}
    stranger = cluster.add_spec(5)
    stranger.env = {
        "FLOTILLA_CLUSTER_SECRET": "a-wrong-secret",
        "FLOTILLA_CLUSTER_SECRET_PREVIOUS": "",
    }
    rejected = setup.rejected("n1", "swim")
    cluster.start("n4", wait=False)
    cluster.start("n5", wait=False)
    cluster.wait_serving("n4")
    cluster.wait_serving("n5")

    def alive(node_id: str) -> int:
        return int(setup.stub(node_id).Health(pb.HealthRequest(), timeout=5).members_alive)

    wait_until(lambda: alive("n1") == 4 and alive("n4") == 4, 30, "n4 (previous secret) a member")
    holds_throughout(lambda: alive("n1") == 4 and alive("n5") == 1, 3, "n5 kept out")
    assert setup.rejected("n1", "swim") > rejected
    cluster.stop("n4")
    cluster.stop("n5")


def test_a_node_without_the_secret_refuses_to_start(setup: Setup, tmp_path: Path) -> None:
    spec = setup.cluster.nodes["n1"]
    args = [
        sys.executable, "-m", "flotilla", "node", "--id", "n9",
        "--listen", f"127.0.0.9:{free_port('127.0.0.9')}", "--data-dir", str(tmp_path / "n9"),
        "--join", spec.address, "--controllers", setup.cluster.controllers_arg,
    ]  # fmt: skip
    env = {k: v for k, v in setup.cluster.env.items() if not k.startswith("FLOTILLA_CLUSTER")}
    started = time.monotonic()
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "cluster_secret is required on node 'n9'" in result.stderr
    assert "FLOTILLA_CLUSTER_SECRET" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 60
