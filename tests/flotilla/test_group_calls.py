"""Group calls without a server: finding the coordinator (metadata of `__groups`, NOT_COORDINATOR
hints, loading and not-yet-created `__groups` retried, other errors raised at once), the error
reasons mapped to the SDK's errors, `reset_group_offsets`' resolution and every argument check
(InvalidArgument naming the value, before anything is sent)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

import flotilla
from flotilla._checks import check_consumer, check_offsets, check_reset_to, check_topics
from flotilla._core import ClientCore, Failed, Rpc, Sleep
from flotilla._group_plans import GroupCalls, group_info, resolve_reset
from flotilla.errors import (
    CoordinatorLoading,
    FencedMember,
    FlotillaError,
    GroupNotEmpty,
    GroupNotFound,
    InvalidArgument,
    NotCoordinator,
    NotLeader,
    TopicNotFound,
    from_rpc_error,
)
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, group_partition


class Status(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str, **trailing: str) -> None:
        self._code, self._details = code, details
        self._trailing = tuple((k.replace("_", "-"), v) for k, v in trailing.items())

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing


FP = grpc.StatusCode.FAILED_PRECONDITION


def test_group_reasons_map_to_the_sdk_errors() -> None:
    hint = "n2=127.0.0.2:7001"
    cases = [
        (Status(FP, "x", flotilla_error="NOT_COORDINATOR", flotilla_leader=hint), NotCoordinator),
        (Status(FP, "x", flotilla_error="FENCED_MEMBER"), FencedMember),
        (Status(FP, "x", flotilla_error="GROUP_NOT_EMPTY"), GroupNotEmpty),
        (Status(grpc.StatusCode.NOT_FOUND, "x", flotilla_error="GROUP_NOT_FOUND"), GroupNotFound),
        (
            Status(grpc.StatusCode.UNAVAILABLE, "x", flotilla_error="COORDINATOR_LOADING"),
            CoordinatorLoading,
        ),
        (Status(FP, "not the leader", flotilla_leader=hint), NotLeader),  # unchanged
        (Status(grpc.StatusCode.NOT_FOUND, "topic 'x'"), TopicNotFound),  # unchanged
    ]
    for status, expected in cases:
        error = from_rpc_error(status)
        assert type(error) is expected, (status.trailing_metadata(), error)
    coordinator = from_rpc_error(cases[0][0])
    assert isinstance(coordinator, NotCoordinator) and coordinator.leader == hint
    for name in ("FencedMember", "GroupNotFound", "GroupNotEmpty", "InvalidArgument"):
        assert issubclass(getattr(flotilla, name), flotilla.FlotillaError)
        assert name in flotilla.__all__


def metadata(groups_partitions: int = 8) -> pb.MetadataResponse:
    members = [
        pb.Member(id=f"n{i}", address=f"127.0.0.{i}:7001", state=pb.ALIVE) for i in (1, 2, 3)
    ]
    partitions = [
        pb.PartitionInfo(index=i, leader="n1", replicas=["n1", "n2", "n3"])
        for i in range(groups_partitions)
    ]
    topic = pb.TopicInfo(name=GROUPS_TOPIC, partitions=partitions)
    return pb.MetadataResponse(members=members, topics=[topic])


def drive(plan: Any, answer: Any) -> tuple[Any, list[Rpc]]:
    """Runs `plan`, answering each Rpc with `answer(rpc)`; (its value, the calls made)."""
    calls: list[Rpc] = []
    outcome: Any = None
    try:
        step = plan.send(None)
        while True:
            if isinstance(step, Sleep):
                outcome = None
            else:
                calls.append(step)
                got = answer(step)
                outcome = Failed(got, "") if isinstance(got, FlotillaError) else got
            step = plan.send(outcome)
    except StopIteration as done:
        return done.value, calls


def test_the_coordinator_is_the_leader_of_the_groups_partition_and_hints_are_followed() -> None:
    core = ClientCore("127.0.0.1:7001", 5.0, "all")
    core.router.absorb(metadata())
    index = group_partition("billing", 8)
    answers = iter(
        [
            CoordinatorLoading("loading"),
            NotCoordinator("not me", "n3=127.0.0.3:7001"),
            pb.CommitOffsetsResponse(),
        ]
    )

    def answer(rpc: Rpc) -> Any:
        if rpc.method == "Metadata":
            return metadata()
        return next(answers)

    request = pb.CommitOffsetsRequest(group="billing")
    _, calls = drive(GroupCalls(core).call("billing", "CommitOffsets", request), answer)
    commits = [c.address for c in calls if c.method == "CommitOffsets"]
    # the leader from metadata (loading: retried after a refresh), then the hinted node at once
    assert commits == ["127.0.0.1:7001", "127.0.0.1:7001", "127.0.0.3:7001"]
    assert core.router.leader_address(GROUPS_TOPIC, index) == "127.0.0.3:7001"


def test_a_cluster_without_groups_topic_is_asked_anyway_and_retried() -> None:
    """Before the first group call `__groups` does not exist: the call goes to any node (which
    creates it) and is retried until the coordinator answers."""
    core = ClientCore("127.0.0.1:7001", 5.0, "all")
    created = {"yet": False}

    def answer(rpc: Rpc) -> Any:
        if rpc.method == "Metadata":
            if not created["yet"]:
                return TopicNotFound(f"topic '{GROUPS_TOPIC}' does not exist")
            return metadata()
        if not created["yet"]:
            created["yet"] = True
            return CoordinatorLoading("creating __groups")
        return pb.GroupInfo(name="billing", kind="stream")

    info, calls = drive(GroupCalls(core).describe_group("billing"), answer)
    assert info.name == "billing" and info.members == () and info.partitions == ()
    assert [c.method for c in calls if c.method != "Metadata"] == ["DescribeGroup"] * 2


def test_errors_no_retry_cures_raise_at_once() -> None:
    core = ClientCore("127.0.0.1:7001", 5.0, "all")
    core.router.absorb(metadata())
    for error in (GroupNotFound("no group"), FencedMember("fenced"), GroupNotEmpty("busy")):
        with pytest.raises(type(error)):
            drive(
                GroupCalls(core).delete_group("billing"),
                lambda rpc, error=error: metadata() if rpc.method == "Metadata" else error,
            )
    with pytest.raises(TopicNotFound, match="payments"):  # a commit naming an unknown topic
        drive(
            GroupCalls(core).commit("billing", "m", 1, {("payments", 0): 1}),
            lambda rpc: TopicNotFound("topic 'payments' does not exist"),
        )


def test_list_groups_asks_every_partition_and_merges() -> None:
    core = ClientCore("127.0.0.1:7001", 5.0, "all")
    core.router.absorb(metadata(3))

    def answer(rpc: Rpc) -> Any:
        names = {0: ["b", "a"], 1: [], 2: ["c"]}[rpc.request.partition]
        return pb.ListGroupsResponse(names=names)

    names, calls = drive(GroupCalls(core).list_groups(), answer)
    assert names == ["a", "b", "c"]
    assert sorted(c.request.partition for c in calls) == [0, 1, 2]


def test_describe_group_converts_the_coordinators_answer() -> None:
    message = pb.GroupInfo(
        name="billing", kind="stream", coordinator="n2",
        members=[pb.GroupMemberInfo(id="m-1", instance_id="", epoch=3,
                                    assignment=[pb.TopicPartition(topic="orders", partition=1)])],
        partitions=[
            pb.GroupPartitionInfo(topic="orders", partition=0, high_watermark=9, lag=9),
            pb.GroupPartitionInfo(topic="orders", partition=1, committed=4, high_watermark=9,
                                  lag=5, owner="m-1"),
        ],
    )  # fmt: skip
    info = group_info(message)
    assert info.members == (flotilla.GroupMember("m-1", None, frozenset({("orders", 1)}), 3),)
    assert info.partitions == (
        flotilla.GroupPartition("orders", 0, None, 9, 9, None),
        flotilla.GroupPartition("orders", 1, 4, 9, 5, "m-1"),
    )


def test_reset_resolves_to_explicit_offsets_within_each_partition() -> None:
    bounds = [(0, 10), (5, 20)]
    assert resolve_reset("g", "t", "earliest", bounds) == {0: 0, 1: 5}
    assert resolve_reset("g", "t", "latest", bounds) == {0: 10, 1: 20}
    assert resolve_reset("g", "t", 7, bounds) == {0: 7, 1: 7}
    assert resolve_reset("g", "t", {1: 6}, bounds) == {1: 6}
    with pytest.raises(
        InvalidArgument, match=r"offset 3 is out of range for t/1: valid offsets are 5..20"
    ):
        resolve_reset("g", "t", 3, bounds)
    with pytest.raises(InvalidArgument, match=r"partition 2 of topic 't' does not exist"):
        resolve_reset("g", "t", {2: 0}, bounds)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: check_reset_to("oldest"), "to='oldest'"),
        (lambda: check_reset_to(-1), "to=-1"),
        (lambda: check_reset_to(True), "to=True"),
        (lambda: check_reset_to({"0": 1}), "partition '0'"),
        (lambda: check_topics([]), "topics=[]"),
        (lambda: check_topics(["orders", 3]), "topic 3"),
        (lambda: check_offsets({("orders", "0"): 1}), "('orders', '0')"),
        (lambda: check_offsets({("orders", 0): 1.5}), "offset 1.5"),
        (lambda: check_consumer(1, 5000, 10_000, None, None, None), "auto_commit=1"),
        (lambda: check_consumer(True, 0, 10_000, None, None, None), "auto_commit_interval_ms=0"),
        (lambda: check_consumer(True, 5000, 500, None, None, None), "session_timeout_ms=500"),
        (lambda: check_consumer(True, 5000, 10_000, "", None, None), "instance_id=''"),
        (lambda: check_consumer(True, 5000, 10_000, None, "f", None), "on_assign='f'"),
    ],
)
def test_bad_arguments_are_named(call: Any, named: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert named in str(raised.value)


def test_a_bad_consumer_or_group_argument_sends_nothing() -> None:
    client = flotilla.Client("127.0.0.1:1")  # nothing listens there: a call would hang or fail
    with pytest.raises(InvalidArgument, match="start='oldest'"):
        client.consumer("billing", ["orders"], start="oldest")
    with pytest.raises(InvalidArgument, match="group 'a b'"):
        client.describe_group("a b")
    with pytest.raises(InvalidArgument, match="to='soon'"):
        client.reset_group_offsets("billing", "orders", to="soon")
    consumer = client.consumer("billing", "orders")  # one name is a list of one
    with pytest.raises(InvalidArgument, match="does not own orders/0"):
        consumer.seek("orders", 0, 5)
    with pytest.raises(InvalidArgument, match="max_records=0"):
        consumer.poll(max_records=0)
    with pytest.raises(InvalidArgument, match="timeout_s=-1"):
        consumer.poll(timeout_s=-1)
    assert consumer._thread is None  # refused before it joined
    consumer.close()
