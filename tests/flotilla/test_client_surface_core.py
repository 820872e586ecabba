"""The client core both surfaces drive (`flotilla._core`), run here by a scripted driver with no
network: a plan asks for calls and sleeps, is fed outcomes, and decides alone — so what these
tests see is what the sync and the asyncio client do."""

from __future__ import annotations

import pytest
from harness import drive

from flotilla._core import ClientCore, Failed, Rpc
from flotilla.errors import InvalidArgument, NotLeader, TopicNotFound, Unavailable
from proto import flotilla_pb2 as pb
from proto.records import peek_producer

ADDRESS = {"n1": "127.0.0.1:1", "n2": "127.0.0.2:1", "n3": "127.0.0.3:1"}
METADATA = pb.MetadataResponse(
    members=[pb.Member(id=i, address=a, state=pb.ALIVE) for i, a in ADDRESS.items()],
    topics=[
        pb.TopicInfo(
            name="t",
            partitions=[pb.PartitionInfo(index=0, leader="n1", replicas=list(ADDRESS))],
        )
    ],
)


def refused(address: str) -> Failed:
    return Failed(Unavailable(f"{address}: connection refused"), "connection refused")


def test_an_admin_call_goes_to_the_next_node_and_a_final_error_raises() -> None:
    core = ClientCore(["127.0.0.1:1", "127.0.0.2:1"], timeout_s=10, acks="all")
    names = pb.ListTopicsResponse(names=["a", "b"])
    value, steps = drive(
        core.list_topics(),
        lambda rpc: refused(rpc.address) if rpc.address == "127.0.0.1:1" else names,
    )
    assert value == ["a", "b"]
    assert [(s.address, s.method) for s in steps if isinstance(s, Rpc)] == [
        ("127.0.0.1:1", "ListTopics"),
        ("127.0.0.2:1", "ListTopics"),
    ]
    asked: list[str] = []

    def invalid(rpc: Rpc) -> Failed:
        asked.append(rpc.address)
        return Failed(InvalidArgument("bad name"), "")

    with pytest.raises(InvalidArgument, match="bad name"):
        drive(core.delete_topic("x"), invalid)
    assert len(asked) == 1  # a final error is not retried on another node


def test_a_produce_follows_the_leader_hint_with_the_same_bytes() -> None:
    core = ClientCore("127.0.0.1:1", timeout_s=10, acks="leader")
    core.router.absorb(METADATA)
    core.router.forget_leader("t", 0)
    core.router.note_leader("t", 0, "n2=" + ADDRESS["n2"])  # a stale view: n2 is not leader

    def answer(rpc: Rpc) -> object:
        if rpc.address == ADDRESS["n2"]:
            return Failed(NotLeader("moved", leader="n3=" + ADDRESS["n3"]), "")
        return pb.ProduceResponse(base_offset=7)

    value, steps = drive(core.produce("t", b"v", None, 0, None), answer)
    assert tuple(value) == ("t", 0, 7, None)
    produces = [s for s in steps if isinstance(s, Rpc)]
    assert [s.address for s in produces] == [ADDRESS["n2"], ADDRESS["n3"]]
    first, second = (s.request for s in produces)
    assert isinstance(first, pb.ProduceRequest) and isinstance(second, pb.ProduceRequest)
    assert first.batch == second.batch and first.acks == pb.ACKS_LEADER  # a retry resends it
    assert core.router.written_to("t", 0) == 8  # read-your-writes: reads wait for offset 8
    assert peek_producer(first.batch)[1] == 0  # the partition's first sequence


def test_a_topic_unknown_to_a_lagging_node_is_asked_again_within_the_grace() -> None:
    core = ClientCore("127.0.0.1:1", timeout_s=10, acks="all")
    answers = iter([Failed(TopicNotFound("not yet"), ""), METADATA])
    info, steps = drive(core.describe_topic("t"), lambda rpc: next(answers))
    assert info.name == "t" and [p.leader for p in info.partitions] == ["n1"]
    assert [type(s).__name__ for s in steps] == ["Rpc", "Sleep", "Rpc"]
