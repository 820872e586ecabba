"""The node daemon on real processes: replication, failover, restart, graceful stop, bad input."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.frames import encode_frame
from cluster.local import LocalCluster
from cluster.peer_auth import PEER_KEY, PeerAuth
from flotilla import Client, InvalidArgument, OffsetOutOfRange, TopicNotFound
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc, peer_pb2, peer_pb2_grpc
from proto.records import encode_batch

pytestmark = pytest.mark.integration

ELECTION_TIMEOUT_S = 0.5
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("shared"), 3, config_text=CONFIG) as local:
        local.start()
        yield local


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    """The module's one cluster, shared by tests that leave every node running (each writes to
    topics of its own); a test marked `own_cluster` (it kills, stops or pauses a node) gets a
    cluster of its own."""
    if request.node.get_closest_marker("own_cluster") is None:
        yield request.getfixturevalue("shared_cluster")
        return
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as local:
        local.start()
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.addresses(), timeout_s=30) as sdk:
        yield sdk


def _leader_of(client: Client, topic: str, partition: int) -> str:
    info = client.describe_topic(topic)
    return info.partitions[partition].leader


def _wait_leader(client: Client, topic: str, partition: int, not_: str = "") -> str:
    found: list[str] = []

    def has_leader() -> bool:
        leader = _leader_of(client, topic, partition)
        if leader and leader != not_:
            found.append(leader)
            return True
        return False

    wait_until(has_leader, 30, f"a leader of {topic}/{partition}")
    return found[-1]


def _replica_holds(
    client: Client, topic: str, partition: int, replica: str, expected: list[tuple[int, bytes]]
) -> bool:
    records = client.read(topic, partition, 0, 1000, replica=replica)
    return [(r.offset, r.value) for r in records] == expected


def test_replicas_hold_the_same_records(cluster: LocalCluster, client: Client) -> None:
    client.create_topic("orders", partitions=3, replication_factor=3)
    written: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
    for n in range(60):
        meta = client.produce("orders", f"v{n}".encode(), key=f"k{n}".encode())
        written[meta.partition].append((meta.offset, f"v{n}".encode()))
    for partition, expected in written.items():
        _wait_leader(client, "orders", partition)
        for replica in ("n1", "n2", "n3"):
            wait_until(
                partial(_replica_holds, client, "orders", partition, replica, sorted(expected)),
                20,
                f"replica {replica} of orders/{partition}",
            )


def test_topics_only_metadata_skips_the_live_view(cluster: LocalCluster, client: Client) -> None:
    """What nodes that are not controllers poll for their topic table: each partition's assigned
    replicas, without asking every member for its live view (leader, high watermark)."""
    client.create_topic("specs", partitions=4, replication_factor=3)
    _wait_leader(client, "specs", 0)
    with grpc.insecure_channel(cluster.nodes["n1"].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        request = pb.MetadataRequest(topics=["specs"])
        full = stub.Metadata(request, timeout=10)
        specs = stub.Metadata(pb.MetadataRequest(topics=["specs"], topics_only=True), timeout=10)
        # the gRPC metadata key that asked for the same before the field, honoured for a release
        legacy = stub.Metadata(request, timeout=10, metadata=(("flotilla-topics-only", "1"),))
    assert full.topics[0].partitions[0].leader
    for answer in (specs, legacy):
        [topic] = answer.topics
        assert topic.name == "specs" and topic.replication_factor == 3
        assert [len(p.replicas) for p in topic.partitions] == [3, 3, 3, 3]
        assert not any(p.leader or p.high_watermark for p in topic.partitions), topic


def test_health_counts_the_replicas_that_know_their_leader(
    cluster: LocalCluster, client: Client
) -> None:
    """`replicas_led`: the local replicas that know their group's leader (a leader counts
    itself); once every group has elected, every replica of every node does."""
    client.create_topic("led", partitions=3, replication_factor=3)
    for partition in range(3):
        _wait_leader(client, "led", partition)

    def views() -> list[pb.HealthResponse]:
        answers = []
        for spec in cluster.nodes.values():
            with grpc.insecure_channel(spec.address) as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                answers.append(stub.Health(pb.HealthRequest(), timeout=5))
        return answers

    def every_replica_led() -> bool:
        return all(v.replicas_led == v.partitions and v.partitions >= 3 for v in views())

    wait_until(every_replica_led, 20, "every replica knowing its group's leader")
    assert all(v.replicas_led >= v.leaders for v in views())


@pytest.mark.own_cluster
def test_a_killed_leader_is_replaced_and_no_acknowledged_write_is_lost(
    cluster: LocalCluster, client: Client
) -> None:
    client.create_topic("events", partitions=1, replication_factor=3)
    leader = _wait_leader(client, "events", 0)
    acknowledged: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        with Client(cluster.addresses(), timeout_s=30) as writer:
            n = 0
            while not stop.is_set():
                try:
                    writer.produce("events", f"e{n}".encode(), partition=0)
                    acknowledged.append(n)
                except Exception as error:  # recorded and asserted below
                    errors.append(error)
                n += 1

    thread = threading.Thread(target=produce)
    thread.start()
    wait_until(lambda: len(acknowledged) >= 20, 30, "writes before the kill")
    killed_at = time.monotonic()
    cluster.kill(leader)
    new_leader = _wait_leader(client, "events", 0, not_=leader)
    elected_s = time.monotonic() - killed_at
    before = len(acknowledged)
    wait_until(lambda: len(acknowledged) > before + 20, 30, "writes after the failover")
    stop.set()
    thread.join(timeout=60)
    assert not errors, errors[:3]
    assert elected_s < 10 * ELECTION_TIMEOUT_S, f"new leader {new_leader} after {elected_s:.2f} s"
    values = [r.value for r in client.read("events", 0, 0, 100_000, replica=new_leader)]
    expected = {f"e{n}".encode() for n in acknowledged}
    assert expected <= set(values), "an acknowledged write was lost"
    assert len(values) == len(set(values)), "a retried write was duplicated"

    # the killed node restarts and catches up with the leader's log as it is now (a produce
    # retried across the failover may have committed after `values` was read)
    cluster.start(leader)

    def same_log() -> bool:
        theirs = [r.value for r in client.read("events", 0, 0, 100_000, replica=new_leader)]
        mine = [r.value for r in client.read("events", 0, 0, 100_000, replica=leader)]
        return mine == theirs and len(set(mine)) == len(mine)

    wait_until(same_log, 30, "the restarted node to catch up")


@pytest.mark.own_cluster
def test_a_gracefully_stopped_leader_hands_over_without_failed_writes(
    cluster: LocalCluster, client: Client
) -> None:
    client.create_topic("graceful", partitions=1, replication_factor=3)
    leader = _wait_leader(client, "graceful", 0)
    failures: list[BaseException] = []
    done = threading.Event()
    count = [0]

    def produce() -> None:
        with Client(cluster.addresses(), timeout_s=30) as writer:
            while not done.is_set():
                try:
                    writer.produce("graceful", b"x", partition=0)
                    count[0] += 1
                except Exception as error:
                    failures.append(error)

    thread = threading.Thread(target=produce)
    thread.start()
    wait_until(lambda: count[0] > 10, 30, "writes before the stop")
    assert cluster.stop(leader) == 0
    seen = count[0]
    wait_until(lambda: count[0] > seen + 10, 30, "writes after the stop")
    done.set()
    thread.join(timeout=60)
    assert not failures, failures[:3]
    assert _leader_of(client, "graceful", 0) not in ("", leader)


def test_bad_input_gets_a_precise_status_and_changes_nothing(
    cluster: LocalCluster, client: Client
) -> None:
    before = set(client.list_topics())  # the other tests' topics, on the shared cluster
    for name in ["a/b", "..", "", "x" * 201]:
        with pytest.raises(InvalidArgument, match="topic name"):
            client.create_topic(name, partitions=1, replication_factor=1)
    with pytest.raises(InvalidArgument, match="replication_factor=4 exceeds"):
        client.create_topic("t", partitions=1, replication_factor=4)
    client.create_topic("t", partitions=2, replication_factor=3)
    assert client.create_topic("t", partitions=2, replication_factor=3).name == "t"  # idempotent
    with pytest.raises(InvalidArgument, match="already exists with partitions=2"):
        client.create_topic("t", partitions=5, replication_factor=3)
    assert set(client.list_topics()) == before | {"t"}
    with pytest.raises(TopicNotFound, match="partition 7 of topic 't' does not exist"):
        client.produce("t", b"v", partition=7)
    _wait_leader(client, "t", 0)
    client.produce("t", b"first", partition=0)
    with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 0\.\.1"):
        client.read("t", 0, offset=5)

    leader = _leader_of(client, "t", 0)
    with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        big = encode_batch([(None, b"x" * (4 * 1024 * 1024 + 1024), None, 0)])
        with pytest.raises(grpc.RpcError) as error:
            stub.Produce(pb.ProduceRequest(topic="t", partition=0, batch=big), timeout=10)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "exceeds max_batch_bytes" in error.value.details()
        # larger than any request a node takes (cluster.ingress): refused by gRPC, unread
        huge = encode_batch([(None, b"x" * (5 * 1024 * 1024), None, 0)])
        with pytest.raises(grpc.RpcError) as error:
            stub.Produce(pb.ProduceRequest(topic="t", partition=0, batch=huge), timeout=10)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in error.value.details()
        with pytest.raises(grpc.RpcError) as error:
            stub.Produce(
                pb.ProduceRequest(topic="t", partition=0, batch=b"garbage" * 10), timeout=10
            )
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as error:
            stub.Fetch(pb.FetchRequest(topic="nope", partition=0), timeout=10)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        # a malformed peer message from a peer that proves itself (cluster.peer_auth) is
        # dropped; the node keeps serving
        peer = peer_pb2_grpc.PeerStub(channel)
        packet = peer_pb2.SwimPacket(from_node="x", payload=b"\xff\x00junk")
        PeerAuth("x", cluster.secret).sign_swim(packet)
        peer.Swim(packet, timeout=5)
        well_framed_junk = encode_frame(1, "n9", leader, [(b"t/0", [b"junk"], 4)])
        frames = [
            peer_pb2.RaftFrame(frame=b"FR\x01junk"),  # a malformed frame
            peer_pb2.RaftFrame.FromString(well_framed_junk),  # a malformed message in a frame
        ]
        proof = PeerAuth("n9", cluster.secret).sign_call()
        peer.Raft(iter(frames), timeout=5, metadata=[(PEER_KEY, proof)])
    assert [r.value for r in client.read("t", 0, 0)] == [b"first"]
    assert client.produce("t", b"second", partition=0).offset == 1


def test_a_producer_s_batches_are_written_in_sequence_order_only(
    cluster: LocalCluster, client: Client
) -> None:
    """The leader holds each producer's batches to sequence order (so pipelined batches and
    retries cannot overtake each other), answers a retry with its first copy, and refuses a
    producer it does not know unless it starts at sequence 0 (UNKNOWN_PRODUCER_ID)."""
    client.create_topic("seq", partitions=1, replication_factor=3)
    leader = _wait_leader(client, "seq", 0)

    def produce(stub: flotilla_pb2_grpc.FlotillaStub, sequence: int, count: int = 1) -> int:
        rows = [(None, f"s{sequence + n}".encode(), None, 0) for n in range(count)]
        batch = encode_batch(rows, producer_id=77, base_sequence=sequence)
        request = pb.ProduceRequest(topic="seq", partition=0, batch=batch)
        return int(stub.Produce(request, timeout=10).base_offset)

    with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            produce(stub, 100, 2)  # unknown producer: only sequence 0 starts it
        assert error.value.code() == grpc.StatusCode.ABORTED
        assert "must start at sequence 0, not sequence 100" in error.value.details()
        assert produce(stub, 0, 2) == 0
        for early in (3, 5):
            with pytest.raises(grpc.RpcError) as error:
                produce(stub, early)
            assert error.value.code() == grpc.StatusCode.ABORTED
            assert "but 2 comes next" in error.value.details()
        assert produce(stub, 0, 2) == 0  # a retry: the first copy's offsets
        assert produce(stub, 2) == 2
    # from the leader: the raw stub's writes are not this client's, so a follower may be a
    # tick behind (read-your-writes covers only the client's own produces)
    records = client.read("seq", 0, 0, replica=leader)
    assert [r.value for r in records] == [b"s0", b"s1", b"s2"]


def test_a_batch_that_fails_for_good_does_not_wedge_the_partition(
    cluster: LocalCluster,
) -> None:
    """A batch refused for good leaves a gap in its producer's sequences; the client moves the
    partition to a new producer id, so the next batch is written (not refused forever)."""
    with Client(cluster.addresses(), timeout_s=5) as client:
        client.create_topic("gap", partitions=1, replication_factor=3)
        _wait_leader(client, "gap", 0)
        assert client.produce("gap", b"one", partition=0).offset == 0
        # refused by the handler (over max_batch_bytes) or, this far over, by gRPC's request
        # limit before it is read (cluster.ingress)
        with pytest.raises(InvalidArgument, match=r"exceeds max_batch_bytes|larger than max"):
            client.produce("gap", b"x" * (5 * 1024 * 1024), partition=0)
        assert client.produce("gap", b"two", partition=0).offset == 1


@pytest.mark.own_cluster
def test_a_paused_leader_costs_one_attempt_not_the_whole_timeout(cluster: LocalCluster) -> None:
    """A leader that stops answering without closing its connections (SIGSTOP): the SDK gives
    up on it after one attempt's deadline and finds the new leader through the other replicas,
    well within the produce's timeout."""
    with Client(cluster.addresses(), timeout_s=20) as client:
        client.create_topic("paused", partitions=1, replication_factor=3)
        leader = _wait_leader(client, "paused", 0)
        client.produce("paused", b"before", partition=0)
        cluster.pause(leader)
        try:
            meta = client.produce("paused", b"during", partition=0)
        finally:
            cluster.resume(leader)
        assert meta.offset == 1


@pytest.mark.own_cluster
def test_a_leader_paused_past_its_lease_never_calls_an_acknowledged_offset_out_of_range(
    cluster: LocalCluster,
) -> None:
    """A leader paused (SIGSTOP) while the others elect a new one and acknowledge records must
    not, once resumed, answer a read of one of them from its own stale state: its lease was
    counted in ticks that did not pass while it was paused (OUT_OF_RANGE there would tell the
    reader an acknowledged record does not exist). Which the resumed node does first, answer
    the queued reads or hear of the new leader, is a race: two rounds, 40 reads each."""
    codes: list[grpc.StatusCode] = []
    with Client(cluster.addresses(), timeout_s=20) as client:
        client.create_topic("leased", partitions=1, replication_factor=3)
        end = client.produce("leased", b"before", partition=0).offset + 1
        for _ in range(2):
            leader = _wait_leader(client, "leased", 0)
            stale = flotilla_pb2_grpc.FlotillaStub(
                grpc.insecure_channel(cluster.nodes[leader].address)
            )
            wait_until(  # the leader holds its lease: a read past the end is answered at once
                partial(_out_of_range, stale, "leased", end), 10, "a lease read on the leader"
            )
            cluster.pause(leader)
            try:
                _wait_leader(client, "leased", 0, not_=leader)
                for value in (b"during-1", b"during-2"):
                    end = client.produce("leased", value, partition=0).offset + 1
                read = pb.FetchRequest(topic="leased", partition=0, offset=end - 1, max_records=1)
                asked = [stale.Fetch.future(read, timeout=10) for _ in range(40)]  # queued
            finally:
                cluster.resume(leader)
            for call in asked:
                try:
                    call.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as error:
                    codes.append(error.code())
    assert grpc.StatusCode.OUT_OF_RANGE not in codes, codes


def _out_of_range(stub: flotilla_pb2_grpc.FlotillaStub, topic: str, end: int) -> bool:
    try:
        stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=end + 1), timeout=5)
    except grpc.RpcError as error:
        return error.code() is grpc.StatusCode.OUT_OF_RANGE
    return False


def _placement(topic: str, partitions: int, nodes: list[str]) -> dict[int, set[str]]:
    from cluster.placement import Candidate, partition_id, place

    candidates = [Candidate(n) for n in nodes]
    return {p: set(place(partition_id(topic, p), candidates, 3)) for p in range(partitions)}


def _voters(client: Client, topic: str) -> dict[int, set[str]]:
    return {p.index: set(p.replicas) for p in client.describe_topic(topic).partitions}


def _fourth_node_joins(local: LocalCluster, client: Client, topic: str) -> dict[int, set[str]]:
    """A topic of 6 partitions holding 30 records ("m0".."m29", round robin) on 3 nodes; then
    n4 joins. Returns the placement, once the replicas follow it."""
    client.create_topic(topic, partitions=6, replication_factor=3)
    for n in range(30):
        client.produce(topic, f"m{n}".encode(), partition=n % 6)
    local.add_node()
    expected = _placement(topic, 6, ["n1", "n2", "n3", "n4"])
    assert any("n4" in replicas for replicas in expected.values())
    wait_until(
        lambda: _voters(client, topic) == expected,
        60,
        f"replicas to follow placement {expected}",
        detail=lambda: _voters(client, topic),
    )
    return expected


def test_a_joining_node_takes_over_its_placement(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            expected = _fourth_node_joins(local, client, "moves")
            for partition, replicas in expected.items():
                if "n4" in replicas:
                    written = [(n // 6, f"m{n}".encode()) for n in range(30) if n % 6 == partition]
                    wait_until(
                        partial(_replica_holds, client, "moves", partition, "n4", written),
                        30,
                        f"n4's copy of moves/{partition}",
                    )
            client.produce("moves", b"after", partition=0)


def test_a_dead_node_is_replaced_after_replace_after(tmp_path: Path) -> None:
    config = CONFIG + "replace_after_s = 3.0\n"
    with LocalCluster(tmp_path, 4, config_text=config) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic("heal", partitions=4, replication_factor=3)
            before = _placement("heal", 4, ["n1", "n2", "n3", "n4"])
            wait_until(
                lambda: _voters(client, "heal") == before,
                60,
                f"initial placement {before}",
                detail=lambda: _voters(client, "heal"),
            )
            local.kill("n4")
            after = _placement("heal", 4, ["n1", "n2", "n3"])
            wait_until(
                lambda: _voters(client, "heal") == after, 90, f"n4's replicas to be replaced: {after}",
                detail=lambda: _voters(client, "heal"),
            )  # fmt: skip
            assert all(len(v) == 3 and "n4" not in v for v in _voters(client, "heal").values())
            for partition in range(4):
                client.produce("heal", b"still writable", partition=partition)


def test_removed_replicas_retire_and_come_back_when_placement_returns(tmp_path: Path) -> None:
    """Replica GC: a replica moved away deletes its log (leaving a marker); when placement
    brings the partition back, its leader re-adds that node, which catches up from empty."""
    config = CONFIG + "replace_after_s = 3.0\n"
    with LocalCluster(tmp_path, 3, config_text=config) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            expected = _fourth_node_joins(local, client, "gc")
            moved = {
                p: ({"n1", "n2", "n3"} - replicas).pop()
                for p, replicas in expected.items()
                if "n4" in replicas
            }
            assert moved

            def replica_dir(partition: int, node_id: str) -> Path:
                return tmp_path / node_id / "partitions" / "gc" / str(partition)

            def retired(path: Path) -> bool:
                return (path / "RETIRED").exists() and not (path / "log").exists()

            for partition, node_id in moved.items():
                wait_until(
                    partial(retired, replica_dir(partition, node_id)),
                    30,
                    f"{node_id}'s replica of gc/{partition} to retire",
                )
            local.kill("n4")  # gone for good: the partitions come back to where they were
            back = _placement("gc", 6, ["n1", "n2", "n3"])
            wait_until(
                lambda: _voters(client, "gc") == back, 90, f"placement {back}",
                detail=lambda: _voters(client, "gc"),
            )  # fmt: skip
            for partition, node_id in moved.items():
                written = [(n // 6, f"m{n}".encode()) for n in range(30) if n % 6 == partition]
                wait_until(
                    partial(_replica_holds, client, "gc", partition, node_id, written),
                    30,
                    f"{node_id}'s new copy of gc/{partition}",
                )
                assert (replica_dir(partition, node_id) / "REJOINED").exists()
            client.produce("gc", b"after", partition=next(iter(moved)))


def test_a_node_away_while_a_topic_is_created_again_serves_only_the_new_one(
    tmp_path: Path,
) -> None:
    """The deleted topic's records never come back: the node that missed the deletion finds
    its old replica belongs to an earlier incarnation (another uid) and wipes it."""
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            first = client.create_topic("again", partitions=1, replication_factor=3)
            assert len(first.uid) == 32
            for n in range(20):
                client.produce("again", b"old-%d" % n, partition=0)
            wait_until(
                partial(_replica_holds, client, "again", 0, "n3",
                        [(n, b"old-%d" % n) for n in range(20)]),
                30, "n3's copy of the first topic",
            )  # fmt: skip
            local.kill("n3")
            client.delete_topic("again")

            def deleted_everywhere() -> bool:  # else a lagging node may call the topic there
                for node_id in ("n1", "n2"):
                    with Client(local.nodes[node_id].address, timeout_s=5) as one:
                        if "again" in one.list_topics():
                            return False
                return True

            wait_until(deleted_everywhere, 30, "the deletion, on every live node")
            second = client.create_topic("again", partitions=1, replication_factor=3)
            assert second.uid != first.uid
            wait_until(lambda: _leader_of(client, "again", 0), 30, "a leader of the new topic")
            client.produce("again", b"new-0", partition=0)
            local.start("n3")
            wait_until(
                partial(_replica_holds, client, "again", 0, "n3", [(0, b"new-0")]),
                30, "n3 to serve the new topic",
                detail=lambda: client.read("again", 0, 0, 100, replica="n3"),
            )  # fmt: skip
            client.produce("again", b"new-1", partition=0)
            for replica in ("n1", "n2", "n3"):
                wait_until(
                    partial(_replica_holds, client, "again", 0, replica,
                            [(0, b"new-0"), (1, b"new-1")]),
                    30, f"{replica} to hold only the new topic's records",
                )  # fmt: skip


def test_the_metrics_endpoint_reports_partitions_and_latencies(tmp_path: Path) -> None:
    import urllib.request

    from cluster.local import free_port

    with LocalCluster(tmp_path, 1, config_text=CONFIG) as local:
        port = free_port("127.0.0.1")
        local.nodes["n1"].extra_args = ["--metrics", f"127.0.0.1:{port}"]
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            client.create_topic("metered", partitions=2, replication_factor=1)
            for n in range(5):
                client.produce("metered", b"m", partition=n % 2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    assert 'flotilla_partition_high_watermark{node="n1",partition="0",topic="metered"} 3.0' in text
    assert 'flotilla_partition_is_leader{node="n1",partition="1",topic="metered"} 1.0' in text
    assert 'flotilla_produce_requests_total{code="OK",node="n1"} 5.0' in text
    assert "flotilla_produce_request_duration_seconds_bucket" in text
    assert "flotilla_storage_round_duration_seconds_bucket" in text
    assert "flotilla_fsync_duration_seconds_bucket" in text
    assert "flotilla_leader_changes_total" in text
