"""The SDK names the topic incarnation it learned from metadata on every produce and read
(`topic_uid`), treats INCONSISTENT_TOPIC_UID as stale metadata (refresh, then retry with the
incarnation the cluster has now), and passes over a node's report of an incarnation this client
deleted. Plans driven with no network (`test_client_surface_core.drive`); the node's side, and
the refusal on real nodes, are in tests/cluster/test_topic_incarnation.py."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from harness import drive, open_replica

from cluster.reads import other_incarnation
from flotilla._core import ClientCore, Failed, Rpc
from flotilla._plans import Subscription
from flotilla.errors import StaleMetadata, Unavailable, from_rpc_error
from proto import flotilla_pb2 as pb
from proto.reasons import INCONSISTENT_TOPIC_UID, REASON_KEY

ADDRESS = {"n1": "127.0.0.1:1", "n2": "127.0.0.2:1", "n3": "127.0.0.3:1"}


def _metadata(uid: str) -> pb.MetadataResponse:
    return pb.MetadataResponse(
        members=[pb.Member(id=i, address=a, state=pb.ALIVE) for i, a in ADDRESS.items()],
        topics=[
            pb.TopicInfo(
                name="t",
                uid=uid,
                partitions=[pb.PartitionInfo(index=0, leader="n1", replicas=list(ADDRESS))],
            )
        ],
    )


class _Refusal(grpc.RpcError):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "t/0 on n1 is of topic incarnation new, not old as asked"

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((REASON_KEY, INCONSISTENT_TOPIC_UID),)


def test_the_refusal_is_stale_metadata_a_retriable_unavailability() -> None:
    error = from_rpc_error(_Refusal())
    assert isinstance(error, StaleMetadata) and isinstance(error, Unavailable)


def test_a_produce_refused_as_another_incarnation_refreshes_and_names_the_new_one() -> None:
    core = ClientCore(list(ADDRESS.values()), timeout_s=10, acks="all")
    core.router.absorb(_metadata("old"))
    sent: list[str] = []

    def answer(rpc: Rpc) -> object:
        if rpc.method == "Metadata":
            return _metadata("new")
        assert isinstance(rpc.request, pb.ProduceRequest)
        sent.append(rpc.request.topic_uid)
        if rpc.request.topic_uid != "new":
            return Failed(StaleMetadata("t/0 on n1 is of topic incarnation new"), "")
        return pb.ProduceResponse(base_offset=7, record_count=1)

    value, steps = drive(core.produce("t", b"v", None, 0, None), answer)
    assert value.offset == 7
    assert sent == ["old", "new"]
    methods = [s.method for s in steps if isinstance(s, Rpc)]
    assert methods == ["Produce", "Metadata", "Produce"]  # refreshed before the retry


def test_a_read_names_the_incarnation_and_a_refusal_moves_on_then_refreshes() -> None:
    core = ClientCore(list(ADDRESS.values()), timeout_s=10, acks="all")
    core.router.absorb(_metadata("old"))
    asked: list[str] = []

    def answer(rpc: Rpc) -> object:
        if rpc.method == "Metadata":
            return _metadata("new")
        assert isinstance(rpc.request, pb.FetchRequest)
        asked.append(rpc.request.topic_uid)
        if rpc.request.topic_uid != "new":
            return Failed(StaleMetadata("another incarnation"), "")
        return pb.FetchResponse(high_watermark=0, leader=True)

    drive(core.fetch("t", 0, 0, 10, None), answer)
    assert asked == ["old", "old", "old", "new"]  # every replica, then the metadata anew
    subscription = core.subscription("t", 0, 0, None, 5.0, None)
    assert subscription.connect()[1].topic_uid == "new"
    assert Subscription.failed(subscription, StaleMetadata("another incarnation"))
    assert not subscription.failed(Unavailable("connection refused"))


def test_a_node_s_report_of_an_incarnation_this_client_deleted_is_passed_over() -> None:
    core = ClientCore(list(ADDRESS.values()), timeout_s=10, acks="all")
    core.router.absorb(_metadata("old"))
    drive(core.delete_topic("t"), lambda rpc: pb.DeleteTopicResponse())
    assert core.router.leader_address("t", 0) is None  # its leaders went with it
    core.router.absorb(_metadata("old"))  # a node that has not caught up with the deletion
    assert core.router.topic("t") is None and core.router.leader_address("t", 0) is None
    core.router.absorb(_metadata("new"))
    assert core.router.topic_uid("t") == "new"


def test_a_replica_of_another_incarnation_than_the_node_knows_is_refused_without_a_uid(
    tmp_path: Path,
) -> None:
    """The node's own check, with no uid in the request (an old client): its view of the topic
    is the new incarnation, its replica still the deleted one's."""
    replica = open_replica(tmp_path)
    try:
        replica.set_topic_uid("old")
        assert other_incarnation(replica.group, "", "old", replica.topic_uid, "b") is None
        refusal = other_incarnation(replica.group, "", "new", replica.topic_uid, "b")
        assert refusal is not None and refusal.code is grpc.StatusCode.UNAVAILABLE
        assert refusal.reason == INCONSISTENT_TOPIC_UID and "old" in refusal.message
        asked = other_incarnation(replica.group, "old", "new", "", "b")
        assert asked is not None and "not old as asked" in asked.message
        assert other_incarnation(replica.group, "", "", replica.topic_uid, "b") is None
    finally:
        replica.close()


@pytest.mark.parametrize("known", ["", "new"])
def test_no_uid_anywhere_is_served_as_before(known: str) -> None:
    assert other_incarnation("t/0", "", known, "", "b") is None
