"""Consumer groups on real nodes (`cluster.groups`, `cluster.groups_service`), driven over raw gRPC
as an SDK would (the SDK is tested in tests/flotilla): `__groups` is created on the first group
call (through n3, which is no controller, so its creation is forwarded), members join and share a
topic's partitions, requests reach the coordinator by following NOT_COORDINATOR hints, an idle
group writes nothing, a removed member's commit is fenced, a recreated topic starts with no
offsets, the lag gauge is served, and a committed offset survives kill -9 of its coordinator with
no reassignment.

One three-node cluster serves the module; the kill test runs last (it restarts what it kills).
`FLOTILLA_GROUP_KILLS=50` runs the kill loop 50 times instead of 5.
"""

from __future__ import annotations

import functools
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness import wait_until
from prometheus_client.parser import text_string_to_metric_families
from queue_calls import Router, reason_of

from cluster.local import LocalCluster, free_port
from consumers.types import LEAVE
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.groups import GROUPS_TOPIC, group_partition
from proto.reasons import (
    COORDINATOR_LOADING,
    FENCED_MEMBER,
    GROUP_NOT_EMPTY,
    GROUP_NOT_FOUND,
    NOT_COORDINATOR,
)

pytestmark = pytest.mark.integration

CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "group_partitions = 4\nleader_balance_after_s = 0\n"
)
GROUP_PARTITIONS = 4
KILLS = int(os.environ.get("FLOTILLA_GROUP_KILLS", "5"))


def hint_of(error: grpc.RpcError) -> str:
    return str(dict(error.trailing_metadata() or ()).get("flotilla-leader", ""))


@dataclass
class Groups(Router):
    """The group RPCs over raw gRPC, finding a group's coordinator as an SDK does
    (`queue_calls.Router`)."""

    attempt_s: float = 5.0

    def heartbeat(self, group: str, member_id: str = "", epoch: int = 0, **fields: Any) -> Any:
        owned = [pb.TopicPartition(topic=t, partition=p) for t, p in fields.pop("owned", ())]
        request = pb.GroupHeartbeatRequest(
            group=group, member_id=member_id, member_epoch=epoch, owned=owned, **fields
        )
        return self.call("GroupHeartbeat", request)

    def offsets(self, group: str, *topics: str) -> dict[tuple[str, int], int]:
        response = self.call("FetchOffsets", pb.FetchOffsetsRequest(group=group, topics=topics))
        return {(o.topic, o.partition): o.offset for o in response.offsets}


@dataclass
class Member:
    """A member that owns exactly what its last heartbeat's answer assigned it."""

    groups: Groups
    group: str
    topics: list[str]
    session_timeout_ms: int = 10_000
    member_id: str = ""
    epoch: int = 0
    owned: set[tuple[str, int]] = field(default_factory=set)

    def beat(self) -> set[tuple[str, int]]:
        first = not self.member_id
        reply = self.groups.heartbeat(
            self.group, self.member_id, self.epoch, owned=sorted(self.owned),
            topics=self.topics if first else [], topics_unchanged=not first,
            session_timeout_ms=self.session_timeout_ms,
        )  # fmt: skip
        self.member_id, self.epoch = reply.member_id, reply.member_epoch
        self.owned = {(tp.topic, tp.partition) for tp in reply.assignment}
        return self.owned

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        request = pb.CommitOffsetsRequest(
            group=self.group, member_id=self.member_id, member_epoch=self.epoch,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()],
        )  # fmt: skip
        self.groups.call("CommitOffsets", request)


@dataclass
class Setup:
    local: LocalCluster
    groups: Groups
    client: Client
    metrics: dict[str, str]  # node id -> metrics HOST:PORT


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root: Path = tmp_path_factory.mktemp("groups")
    with LocalCluster(root, 3, controllers=2, config_text=CONFIG) as local:
        metrics = {}
        for spec in local.nodes.values():
            metrics[spec.node_id] = f"{spec.host}:{free_port(spec.host)}"
            spec.extra_args = ["--metrics", metrics[spec.node_id]]
        local.start()
        groups = Groups(local)
        client = Client(local.addresses(), timeout_s=30)
        try:
            yield Setup(local, groups, client, metrics)
        finally:
            client.close()
            groups.close()


def metadata(setup: Setup, topic: str) -> pb.TopicInfo:
    """The topic's metadata from a running node (one that has loaded the topic table)."""
    found: list[pb.TopicInfo] = []

    def answered() -> bool:
        for address in setup.groups.running():
            stub = setup.groups.stub(address)
            try:
                response = stub.Metadata(pb.MetadataRequest(topics=[topic]), timeout=10)
            except grpc.RpcError as error:
                # starting, or its table is a poll behind a topic just created
                if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND):
                    continue
                raise
            found[:] = response.topics
            return True
        return False

    wait_until(answered, 30, f"metadata of {topic}")
    (info,) = found
    return info


def _topics_loaded(setup: Setup, node_id: str) -> bool:
    stub = setup.groups.stub(setup.local.nodes[node_id].address)
    try:
        stub.Metadata(pb.MetadataRequest(topics_only=True), timeout=5)
    except grpc.RpcError:
        return False
    return True


def _member_states(setup: Setup) -> dict[str, dict[str, int] | str]:
    """Each node's view of the members' states (or why it did not answer)."""
    views: dict[str, dict[str, int] | str] = {}
    for node_id, spec in setup.local.nodes.items():
        try:
            response = setup.groups.stub(spec.address).Metadata(pb.MetadataRequest(), timeout=5)
        except grpc.RpcError as error:
            views[node_id] = str(error.code())
            continue
        views[node_id] = {member.id: int(member.state) for member in response.members}
    return views


def _all_alive(setup: Setup) -> bool:
    views = _member_states(setup)
    return all(
        isinstance(view, dict) and len(view) == len(setup.local.nodes)
        and set(view.values()) == {pb.ALIVE}
        for view in views.values()
    )  # fmt: skip


def coordinator_of(setup: Setup, group: str) -> str:
    partition = group_partition(group, GROUP_PARTITIONS)
    return str(metadata(setup, GROUPS_TOPIC).partitions[partition].leader)


# -- the internal topic ------------------------------------------------------------------------------
def test_the_first_group_call_creates_groups_and_clients_cannot_touch_it(setup: Setup) -> None:
    n3 = setup.groups.stub(setup.local.nodes["n3"].address)  # no controller: creation forwarded
    wait_until(lambda: _answers(n3), 30, "n3 answers a group call once __groups is up")
    info = metadata(setup, GROUPS_TOPIC)
    assert len(info.partitions) == GROUP_PARTITIONS and info.replication_factor == 3
    wait_until(
        lambda: all(p.leader for p in metadata(setup, GROUPS_TOPIC).partitions), 30, "leaders"
    )
    uid = info.uid
    # clients may not create, alter, delete or produce to the cluster's own topics
    for node_id in ("n1", "n3"):  # a controller, and a node that forwards topic changes
        stub = setup.groups.stub(setup.local.nodes[node_id].address)
        refusals = [
            ("CreateTopic", pb.CreateTopicRequest(name="__mine", partitions=1)),
            ("CreateTopic", pb.CreateTopicRequest(name=GROUPS_TOPIC, partitions=1)),
            ("AlterTopic", pb.AlterTopicRequest(name=GROUPS_TOPIC, retention_bytes=1)),
            ("DeleteTopic", pb.DeleteTopicRequest(name=GROUPS_TOPIC)),
            ("Produce", pb.ProduceRequest(topic=GROUPS_TOPIC, partition=0, batch=b"x")),
        ]
        for what, request in refusals:
            with pytest.raises(grpc.RpcError) as refused:
                getattr(stub, what)(request, timeout=10)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (node_id, what)
            assert "'__'" in refused.value.details(), (node_id, what, refused.value.details())
    after = metadata(setup, GROUPS_TOPIC)
    assert after.uid == uid and after.retention_bytes == 0  # nothing changed
    assert "__mine" not in setup.client.list_topics()
    assert GROUPS_TOPIC not in setup.client.list_topics()  # hidden from the list, still served


def _answers(stub: flotilla_pb2_grpc.FlotillaStub) -> bool:
    try:
        stub.ListGroups(pb.ListGroupsRequest(partition=0), timeout=5)
        return True
    except grpc.RpcError as error:
        if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return False
        if reason_of(error) == NOT_COORDINATOR:
            return True
        raise


# -- membership ----------------------------------------------------------------------------------
def test_three_members_share_a_topic_and_no_partition_has_two_owners(setup: Setup) -> None:
    setup.client.create_topic("orders", partitions=6, replication_factor=3)
    members = [Member(setup.groups, "billing", ["orders"]) for _ in range(3)]
    everything = {("orders", p) for p in range(6)}
    seen_twice: list[object] = []

    def settled(active: list[Member]) -> bool:
        for member in active:
            member.beat()
            owners: dict[tuple[str, int], str] = {}
            for other in members:
                for tp in other.owned:
                    if tp in owners:
                        seen_twice.append((tp, owners[tp], other.member_id))
                    owners[tp] = other.member_id
        return set().union(*(m.owned for m in active)) == everything

    for count in (1, 2, 3):  # they join one by one
        wait_until(
            lambda: settled(members[:count]), 30,  # noqa: B023 (called in this iteration)
            f"{count} member(s) own the topic", detail=lambda: [m.owned for m in members],
        )  # fmt: skip
    assert not seen_twice, seen_twice
    assert len({m.member_id for m in members}) == 3
    assert sum(1 for m in members if m.owned) >= 2, [m.owned for m in members]
    info = setup.groups.call("DescribeGroup", pb.DescribeGroupRequest(group="billing"))
    assert info.name == "billing" and info.kind == "stream"
    assert info.coordinator == coordinator_of(setup, "billing")
    described = {m.id: {(tp.topic, tp.partition) for tp in m.assignment} for m in info.members}
    assert described == {m.member_id: m.owned for m in members}
    owners = {(p.topic, p.partition): p.owner for p in info.partitions}
    assert owners == {tp: m.member_id for m in members for tp in m.owned}


def test_a_node_that_is_not_the_coordinator_names_it(setup: Setup) -> None:
    coordinator = coordinator_of(setup, "billing")
    for node_id, spec in setup.local.nodes.items():
        if node_id == coordinator:
            continue
        stub = setup.groups.stub(spec.address)
        with pytest.raises(grpc.RpcError) as refused:
            stub.DescribeGroup(pb.DescribeGroupRequest(group="billing"), timeout=10)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(refused.value) == NOT_COORDINATOR
        address = setup.local.nodes[coordinator].address
        assert hint_of(refused.value) == f"{coordinator}={address}", refused.value.details()
    # and a refused name changes nothing anywhere
    with pytest.raises(grpc.RpcError) as bad:
        setup.groups.stub(setup.local.nodes["n1"].address).GroupHeartbeat(
            pb.GroupHeartbeatRequest(group="no spaces"), timeout=10
        )
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "'no spaces'" in (
        bad.value.details()
    )
    assert reason_of(bad.value) not in (COORDINATOR_LOADING, NOT_COORDINATOR)


def test_an_idle_group_writes_nothing_to_raft(setup: Setup) -> None:
    setup.client.create_topic("quiet", partitions=2, replication_factor=3)
    member = Member(setup.groups, "idle", ["quiet"])
    wait_until(lambda: len(member.beat()) == 2, 30, "the lone member owns both partitions")
    member.commit({("quiet", 0): 3, ("quiet", 1): 5})
    partition = group_partition("idle", GROUP_PARTITIONS)

    def high_watermark() -> int:
        return int(metadata(setup, GROUPS_TOPIC).partitions[partition].high_watermark)

    before = high_watermark()
    for _ in range(20):  # heartbeats that change nothing, and auto-commits of the same offsets
        member.beat()
        member.commit({("quiet", 0): 3, ("quiet", 1): 5})
    assert high_watermark() == before, "an idle group wrote to __groups"
    member.commit({("quiet", 0): 4})  # and a commit that changes something is written
    assert high_watermark() == before + 1


def test_a_group_with_members_is_not_deleted_and_every_group_is_listed(setup: Setup) -> None:
    setup.client.create_topic("brief", partitions=1, replication_factor=3)
    member = Member(setup.groups, "short-lived", ["brief"])
    wait_until(lambda: member.beat() == {("brief", 0)}, 30, "the member owns the partition")
    member.commit({("brief", 0): 1})
    delete = pb.DeleteGroupRequest(group="short-lived")
    with pytest.raises(grpc.RpcError) as refused:
        setup.groups.call("DeleteGroup", delete)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(refused.value) == GROUP_NOT_EMPTY, refused.value.details()
    listed: set[str] = set()
    for partition in range(GROUP_PARTITIONS):  # each partition's coordinator lists its groups
        request = pb.ListGroupsRequest(partition=partition)
        listed |= set(setup.groups.call("ListGroups", request, key=f"list/{partition}").names)
    assert {"billing", "idle", "short-lived"} <= listed, listed
    with pytest.raises(grpc.RpcError) as unknown:
        member.commit({("never-made", 0): 1})
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    assert "'never-made'" in unknown.value.details()
    setup.groups.heartbeat("short-lived", member.member_id, LEAVE)  # leaves at once
    setup.groups.call("DeleteGroup", delete)
    with pytest.raises(grpc.RpcError) as gone:
        setup.groups.call("DescribeGroup", pb.DescribeGroupRequest(group="short-lived"))
    assert gone.value.code() is grpc.StatusCode.NOT_FOUND
    assert reason_of(gone.value) == GROUP_NOT_FOUND
    assert setup.groups.offsets("short-lived") == {}


# -- fencing and incarnations ---------------------------------------------------------------------
def test_a_removed_members_commit_is_fenced_and_changes_nothing(setup: Setup) -> None:
    setup.client.create_topic("fence", partitions=2, replication_factor=3)
    zombie = Member(setup.groups, "fenced", ["fence"], session_timeout_ms=1000)
    wait_until(lambda: len(zombie.beat()) == 2, 30, "the first member owns both partitions")
    zombie.commit({("fence", 0): 5})
    other = Member(setup.groups, "fenced", ["fence"])
    # the zombie goes silent; once its session ends the other member gets everything
    wait_until(lambda: len(other.beat()) == 2, 30, "the other member takes both partitions")
    with pytest.raises(grpc.RpcError) as fenced:
        zombie.commit({("fence", 0): 9})
    assert fenced.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(fenced.value) == FENCED_MEMBER, fenced.value.details()
    assert setup.groups.offsets("fenced") == {("fence", 0): 5}
    other.commit({("fence", 0): 6, ("fence", 1): 1})
    assert setup.groups.offsets("fenced") == {("fence", 0): 6, ("fence", 1): 1}


def test_a_recreated_topic_starts_with_no_offsets(setup: Setup) -> None:
    setup.client.create_topic("again", partitions=2, replication_factor=3)
    reset = pb.ResetGroupOffsetsRequest(
        group="reborn", topic="again", offsets=[pb.PartitionOffset(partition=0, offset=7)]
    )
    setup.groups.call("ResetGroupOffsets", reset)
    assert setup.groups.offsets("reborn") == {("again", 0): 7}
    old = metadata(setup, "again").uid
    setup.client.delete_topic("again")
    setup.client.create_topic("again", partitions=2, replication_factor=3)
    wait_until(lambda: metadata(setup, "again").uid != old, 10, "the new incarnation seen")
    coordinator = setup.local.nodes[coordinator_of(setup, "reborn")].address
    wait_until(
        lambda: not setup.groups.offsets("reborn"), 10, "the coordinator forgets the old offsets",
        detail=lambda: (coordinator, setup.groups.offsets("reborn")),
    )  # fmt: skip
    try:
        info = setup.groups.call("DescribeGroup", pb.DescribeGroupRequest(group="reborn"))
    except grpc.RpcError as error:  # a group with no members and no offsets is gone
        assert error.code() is grpc.StatusCode.NOT_FOUND
    else:
        assert not [p for p in info.partitions if p.HasField("committed")], info


# -- metrics ---------------------------------------------------------------------------------------
def test_the_coordinator_serves_the_groups_lag_and_members(setup: Setup) -> None:
    setup.client.create_topic("lagged", partitions=1, replication_factor=3)
    setup.client.produce_batch("lagged", [b"r%d" % n for n in range(10)], partition=0)
    member = Member(setup.groups, "lagging", ["lagged"])
    wait_until(lambda: member.beat() == {("lagged", 0)}, 30, "the member owns the partition")
    member.commit({("lagged", 0): 4})
    info = setup.groups.call("DescribeGroup", pb.DescribeGroupRequest(group="lagging"))
    (partition,) = info.partitions
    assert (partition.committed, partition.high_watermark, partition.lag) == (4, 10, 6)
    with urllib.request.urlopen(f"http://{setup.metrics[info.coordinator]}/metrics") as answer:
        text = answer.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("flotilla_group_")
    }
    group = {"node": info.coordinator, "group": "lagging"}
    lag = tuple(sorted({**group, "topic": "lagged", "partition": "0"}.items()))
    assert samples[("flotilla_group_lag", lag)] == 6, samples
    assert samples[("flotilla_group_members", tuple(sorted(group.items())))] == 1, samples


def test_a_coordinator_resumed_from_a_pause_answers_nothing_stale(setup: Setup) -> None:
    setup.client.create_topic("frozen", partitions=1, replication_factor=3)
    member = Member(setup.groups, "thawed", ["frozen"], session_timeout_ms=60_000)
    wait_until(lambda: member.beat() == {("frozen", 0)}, 30, "the member owns the partition")
    member.commit({("frozen", 0): 5})
    paused = coordinator_of(setup, "thawed")
    stub = setup.groups.stub(setup.local.nodes[paused].address)
    setup.local.pause(paused)
    try:  # another coordinator takes over, and the member commits there
        member.commit({("frozen", 0): 9})
        fetch = pb.FetchOffsetsRequest(group="thawed", topics=["frozen"])
        asked = [stub.FetchOffsets.future(fetch, timeout=10) for _ in range(5)]  # queued
    finally:
        setup.local.resume(paused)
    answers = []
    for call in asked:
        try:
            answers.append([(o.partition, o.offset) for o in call.result().offsets])
        except grpc.RpcError as error:
            answers.append([error.code()])
    assert [(0, 5)] not in answers, answers  # the offset it held before it was paused
    assert setup.groups.offsets("thawed", "frozen") == {("frozen", 0): 9}
    # one fault at a time: the paused node may have been suspected or declared dead meanwhile,
    # and a topic of replication factor 3 is refused while fewer than 3 members are alive
    wait_until(
        functools.partial(_all_alive, setup), 60, "every node sees every member alive",
        detail=functools.partial(_member_states, setup),
    )  # fmt: skip


# -- failover (last: it kills and restarts nodes) ---------------------------------------------------
def test_a_commit_survives_kill_9_of_its_coordinator_and_moves_no_partition(setup: Setup) -> None:
    setup.client.create_topic("durable", partitions=2, replication_factor=3)
    member = Member(setup.groups, "survivor", ["durable"], session_timeout_ms=60_000)
    wait_until(lambda: len(member.beat()) == 2, 30, "the member owns both partitions")
    assignment, epoch = set(member.owned), member.epoch
    for round_ in range(1, KILLS + 1):
        offset = 10 * round_
        member.commit({("durable", 0): offset, ("durable", 1): offset + 1})
        victim = coordinator_of(setup, "survivor")
        setup.local.kill(victim)
        read = setup.groups.offsets("survivor", "durable")
        assert read[("durable", 0)] >= offset and read[("durable", 1)] >= offset + 1, (round_, read)
        assert coordinator_of(setup, "survivor") != victim
        # the new coordinator restarted the member's session: same partitions, same epoch
        assert member.beat() == assignment and member.epoch == epoch, (round_, member)
        setup.local.start(victim)
        # one fault at a time: the next kill waits until the restarted node has its topic table
        # (serving comes first: its control plane may still be catching up)
        wait_until(
            functools.partial(_topics_loaded, setup, victim), 60, f"{victim} loads the topic table"
        )
