"""A topic deleted and created again under its name is another incarnation (`TopicInfo.uid`):
no replica of the deleted one answers a read or takes a produce meant for the new one
(`FetchRequest.topic_uid`, `ProduceRequest.topic_uid`; KIP-516's topic ids).

On real nodes: n3 (not a controller) is cut off from the controllers by its dial map (the
node-level `--dial-map`, re-read when it changes: n1 and n2 routed to a closed port), so its
topic table keeps the deleted incarnation and it keeps that incarnation's replicas: a read of
`reborn` there would answer the deleted copy (`first`), and a produce to the partition of
`solo` (replication factor 1) that n3 led would be acknowledged by the deleted replica and
vanish with it. Each is refused instead (UNAVAILABLE, reason INCONSISTENT_TOPIC_UID), and the SDK
reads the new incarnation from the other replicas. One cluster serves the module; the cut is
healed at its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster, free_port
from flotilla import Client, StaleMetadata
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.reasons import INCONSISTENT_TOPIC_UID, REASON_KEY
from proto.records import encode_batch

pytestmark = pytest.mark.integration

CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nreplace_after_s = 600\n"
    "swim_tick_ms = 50\n"  # the controllers count n3 out sooner once it is cut off
)
LAGGING = "n3"


@dataclass
class Reborn:
    local: LocalCluster
    client: Client
    stub: flotilla_pb2_grpc.FlotillaStub  # n3's
    old_uid: str  # reborn's deleted incarnation
    new_uid: str
    solo_partition: int  # the partition of solo whose one replica is n3
    solo_new_uid: str


def _stub(local: LocalCluster, node_id: str) -> flotilla_pb2_grpc.FlotillaStub:
    return flotilla_pb2_grpc.FlotillaStub(local.channel(local.nodes[node_id].address))


def _reason(error: grpc.RpcError) -> str:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return next((str(v) for k, v in trailing or () if k == REASON_KEY), "")


def _uid_on(stub: flotilla_pb2_grpc.FlotillaStub, topic: str) -> str:
    answer = stub.Metadata(pb.MetadataRequest(topics=[topic]), timeout=5)
    return str(answer.topics[0].uid)


def _known_on(stub: flotilla_pb2_grpc.FlotillaStub, topic: str) -> str:
    """The incarnation of `topic` the node knows, "" while it knows none."""
    try:
        return _uid_on(stub, topic)
    except grpc.RpcError as error:
        if error.code() is grpc.StatusCode.NOT_FOUND:
            return ""
        raise


def _dead_on(stub: flotilla_pb2_grpc.FlotillaStub) -> bool:
    members = stub.Metadata(pb.MetadataRequest(topics=["reborn"]), timeout=5).members
    return any(m.id == LAGGING and m.state == pb.DEAD for m in members)


@pytest.fixture(scope="module")
def reborn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reborn]:
    root: Path = tmp_path_factory.mktemp("incarnation")
    dial_map = root / "n3-dial-map.json"
    dial_map.write_text("{}")
    local = LocalCluster(root, 3, controllers=2, config_text=CONFIG)
    with local:
        local.nodes[LAGGING].extra_args = ["--dial-map", str(dial_map)]
        local.start()
        with Client(local.addresses(), timeout_s=2) as client:
            yield _recreated_behind_n3(local, client, dial_map)
            dial_map.write_text("{}")  # heal: n3 hears the controllers again


def _recreated_behind_n3(local: LocalCluster, client: Client, dial_map: Path) -> Reborn:
    n3 = _stub(local, LAGGING)
    client.create_topic("reborn", partitions=1, replication_factor=3)
    client.produce("reborn", b"first", partition=0)
    client.create_topic("solo", partitions=6, replication_factor=1)
    solo = client.describe_topic("solo")
    on_n3 = [p.index for p in solo.partitions if p.replicas == (LAGGING,)]
    assert on_n3, f"no partition of solo placed on {LAGGING}: {solo.partitions}"
    client.produce("solo", b"old", partition=on_n3[0])

    def n3_holds_first() -> bool:
        request = pb.FetchRequest(topic="reborn", partition=0, offset=0)
        return bool(n3.Fetch(request, timeout=5).batches)

    wait_until(n3_holds_first, 30, "n3's replica of reborn to commit 'first'")
    old_uid = _uid_on(n3, "reborn")
    closed = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    dial_map.write_text(json.dumps({"n1": closed, "n2": closed}))
    # n1 declares n3 dead once n3's answers stop (they go out through its dial map): from then
    # on n3's topic polls fail too, and the controllers place new replicas on n1 and n2 only
    n1, n2 = _stub(local, "n1"), _stub(local, "n2")
    # both controllers: the one that places the new replicas must not still count n3 in (a
    # replica placed there would keep the new incarnation from electing a leader)
    wait_until(lambda: _dead_on(n1) and _dead_on(n2), 30, "n1 and n2 to count n3 out")
    for name in ("reborn", "solo"):
        client.delete_topic(name)
    client.create_topic("reborn", partitions=1, replication_factor=2)
    client.create_topic("solo", partitions=6, replication_factor=1)
    # a controller may answer from its copy of the table a moment before it holds the create
    wait_until(
        lambda: _known_on(n1, "reborn") not in ("", old_uid), 30, "n1 to know the new reborn"
    )
    new_uid = _uid_on(n1, "reborn")
    # the precondition: n3 still knows (and holds) the deleted incarnation
    assert _uid_on(n3, "reborn") == old_uid

    def elected() -> bool:
        answer = n1.Metadata(pb.MetadataRequest(topics=["reborn"]), timeout=5)
        return bool(answer.topics[0].partitions[0].leader)

    wait_until(elected, 60, "a leader of the new incarnation of reborn")
    client.produce("reborn", b"second", partition=0)
    wait_until(lambda: _known_on(n1, "solo") != "", 30, "n1 to know the new solo")
    return Reborn(local, client, n3, old_uid, new_uid, on_n3[0], _uid_on(n1, "solo"))


def test_a_replica_of_the_deleted_incarnation_answers_no_read_of_the_new_one(
    reborn: Reborn,
) -> None:
    request = pb.FetchRequest(topic="reborn", partition=0, offset=0, topic_uid=reborn.new_uid)
    with pytest.raises(grpc.RpcError) as refused:
        answer = reborn.stub.Fetch(request, timeout=5)
        pytest.fail(f"n3 answered a read of the new incarnation with {list(answer.batches)}")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    assert _reason(refused.value) == INCONSISTENT_TOPIC_UID, refused.value
    assert reborn.new_uid in str(refused.value.details()), refused.value.details()
    stream = reborn.stub.Subscribe(request, timeout=5)
    with pytest.raises(grpc.RpcError) as ended:
        pytest.fail(f"n3 streamed {next(stream)} to a subscription of the new incarnation")
    assert _reason(ended.value) == INCONSISTENT_TOPIC_UID, ended.value
    # the SDK names the incarnation it learned: every read, wherever it lands, is the new one
    for _ in range(12):
        assert [r.value for r in reborn.client.read("reborn", 0, 0)] == [b"second"]
    with pytest.raises(StaleMetadata):
        reborn.client.read("reborn", 0, 0, replica=LAGGING)


def test_a_replica_of_the_deleted_incarnation_takes_no_produce_for_the_new_one(
    reborn: Reborn,
) -> None:
    batch = pb.ProduceRequest(
        topic="solo",
        partition=reborn.solo_partition,
        batch=encode_batch([(None, b"lost?", None, 0)]),
        acks=pb.ACKS_ALL,
        topic_uid=reborn.solo_new_uid,
    )
    with pytest.raises(grpc.RpcError) as refused:
        answer = reborn.stub.Produce(batch, timeout=5)
        pytest.fail(f"the deleted incarnation's replica on n3 acknowledged the batch: {answer}")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    assert _reason(refused.value) == INCONSISTENT_TOPIC_UID, refused.value
