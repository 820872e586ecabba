"""The group host (`cluster.groups`) in one process, over a real single-voter `__groups/0` replica
on disk driven by a real MultiRaft: what a restart loads back, that an idle group appends not
one entry, and that an entry of a newer format stops the partition's groups instead of being
guessed at (no rebuild loop). The host's ticks are a `FakeTicker` the test advances."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgpack
import pytest

from cluster.clock import FakeTicker
from cluster.controller import TopicSpec
from cluster.groups import CoordinatorLoading, CoordinatorUnavailable, GroupHost
from cluster.multiraft import MultiRaft, Proposal
from cluster.replica import Replica, Waiter
from cluster.versions import reads_group_entries, reads_queue_entries
from consumers import CommitRequest, Coordinator, HeartbeatRequest, TopicMeta
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC
from proto.records import encode_batch
from raft.config import RaftConfig
from raft.types import Configuration, Role
from storage import FileHandles, HardState, LogConfig, StateJournal

NODE = "n1"
TOPICS = {
    GROUPS_TOPIC: TopicSpec(GROUPS_TOPIC, 1, 1, assignment=((NODE,),), uid="g" * 32),
    "orders": TopicSpec("orders", 2, 1, assignment=((NODE,), (NODE,)), uid="o" * 32),
}


class Node:
    """One node's MultiRaft, its `__groups/0` replica, and a group host over them."""

    def __init__(self, root: Path, versions: Mapping[str, str] | None = None) -> None:
        """`versions`: what gossip says each member runs (default: nothing known)."""
        self.root = root
        self.journal = StateJournal(root / "journal")
        self.multiraft = MultiRaft(NODE, lambda to, group, parts: None, 0.01, self.journal)
        self.replica = Replica.open(
            node_id=NODE, topic=GROUPS_TOPIC, partition=0, directory=str(root / "groups-0"),
            bootstrap=Configuration(voters=frozenset({NODE})),
            hard_state=self.journal.load(f"{GROUPS_TOPIC}/0") or HardState(),
            raft_config=RaftConfig(), log_config=LogConfig(), handles=FileHandles(16),
            rng=random.Random(7),
        )  # fmt: skip
        self.multiraft.add(self.replica)
        self.ticker = FakeTicker(0.1)
        self.host = GroupHost(
            NODE, topics=lambda: TOPICS, topics_loaded=lambda: True, refresh_topics=_nothing,
            replica=self.multiraft.replicas.get, propose=self.multiraft.propose,
            wake=self.multiraft.wake, raft_tick_s=0.01, create_topic=_refuse,
            live_members=lambda: 1, metadata=_no_metadata, group_partitions=1,
            write_timeout_s=5.0, ticker=self.ticker,
            member_version=(versions or {}).get,
        )  # fmt: skip

    async def start(self) -> None:
        self.multiraft.start()
        self.host.start()
        await _until(lambda: self.replica.node.role is Role.LEADER, "an election")

    async def stop(self) -> None:
        await self.host.stop()
        await self.multiraft.stop()

    async def call(self, op: Callable[[Coordinator, Mapping[str, TopicMeta]], Any]) -> Any:
        """Runs `op` on the coordinator, ticking the host until it has loaded."""
        for _ in range(500):
            with contextlib.suppress(CoordinatorLoading):
                return await self.host.call(0, "g", op)
            self.ticker.advance(1)
            await asyncio.sleep(0.01)
        raise AssertionError("the coordinator never loaded")


async def _nothing() -> None:
    return None


async def _refuse(request: pb.CreateTopicRequest) -> object:
    raise AssertionError("the test's __groups exists")


async def _no_metadata(topics: list[str]) -> pb.MetadataResponse:
    return pb.MetadataResponse()


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout_s} s"
        await asyncio.sleep(0.005)


async def _join(node: Node) -> tuple[str, int]:
    """A member of group "g" on "orders" that owns both partitions: (member id, epoch)."""
    request = HeartbeatRequest("g", "", 0, 10_000, topics=("orders",))
    reply = await node.call(lambda c, topics: c.heartbeat(request, topics))
    while len(reply.assignment) < 2:
        beat = HeartbeatRequest("g", reply.member_id, reply.member_epoch, 10_000,
                                owned=reply.assignment)  # fmt: skip

        def again(c: Coordinator, topics: Mapping[str, TopicMeta], beat: Any = beat) -> Any:
            return c.heartbeat(beat, topics)

        reply = await node.call(again)
    return reply.member_id, reply.member_epoch


def test_a_restarted_node_loads_members_and_offsets_back_and_idle_calls_write_nothing(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        await node.start()
        try:
            member, epoch = await _join(node)
            commit = CommitRequest("g", member, epoch, (("orders", 0, 5), ("orders", 1, 7)))
            await node.call(lambda c, topics: c.commit(commit, topics))
            last = node.replica.node.log.last_index
            beat = HeartbeatRequest("g", member, epoch, 10_000,
                                    owned=frozenset({("orders", 0), ("orders", 1)}))  # fmt: skip
            for _ in range(10):  # heartbeats, the same commit again, reads, ticks
                await node.call(lambda c, topics: c.heartbeat(beat, topics))
                await node.call(lambda c, topics: c.commit(commit, topics))
                await node.call(lambda c, topics: c.offsets("g", topics))
                node.ticker.advance(1)
            assert node.replica.node.log.last_index == last  # not one entry
        finally:
            await node.stop()
        node = Node(tmp_path)  # the same disk, a new process's worth of state
        await node.start()
        try:
            offsets = await node.call(lambda c, topics: c.offsets("g", topics))
            assert offsets == {("orders", 0): 5, ("orders", 1): 7}
            view = await node.call(lambda c, topics: c.describe("g", topics))
            assert [(m.id, m.epoch, m.assignment) for m in view.members] == [
                (member, epoch, frozenset({("orders", 0), ("orders", 1)}))
            ]
        finally:
            await node.stop()

    asyncio.run(scenario())


def test_an_entry_of_a_newer_format_stops_the_partitions_groups(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        await node.start()
        try:
            await _join(node)
            # what a node of a newer version might write: format 2
            newer = msgpack.packb([2, 0, "g", "something new"])
            future = asyncio.get_running_loop().create_future()
            batch = encode_batch([(b"g", newer, None, 0)])
            node.multiraft.propose(Proposal(node.replica, batch, 1, 0, Waiter(future)))
            await future
        finally:
            await node.stop()
        node = Node(tmp_path)
        await node.start()
        try:
            for _ in range(3):  # refused each time, and the log is read once, not in a loop
                with pytest.raises(CoordinatorUnavailable, match="cannot"):
                    await node.call(lambda c, topics: c.groups())
                node.ticker.advance(5)
                await asyncio.sleep(0.05)
        finally:
            await node.stop()

    asyncio.run(scenario())
    unreadable = [r for r in caplog.records if "cannot serve the groups" in r.getMessage()]
    assert len(unreadable) == 1, [r.getMessage() for r in caplog.records]


def test_a_write_that_fails_drops_the_coordinator_and_the_next_call_finds_it_rebuilt(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[tuple[str, int]]:
        node = Node(tmp_path)
        await node.start()
        try:
            await node.call(lambda c, topics: c.groups())  # loaded
            patient = node.host.shell
            node.host.shell = dataclasses.replace(patient, write_timeout_s=1e-9)
            for slot in node.host._slots.values():  # the running coordinator's, too
                slot.shell = node.host.shell
            join = HeartbeatRequest("g", "", 0, 10_000, topics=("orders",))
            with pytest.raises(CoordinatorUnavailable, match="failed"):
                await node.call(lambda c, topics: c.heartbeat(join, topics))
            node.host.shell = patient
            # rebuilt from the log: the join's entry may have committed after all (its
            # outcome was unknown), and the coordinator holds exactly what the log holds
            view = await node.call(lambda c, topics: c.groups() and c.describe("g", topics))
            rebuilt = sorted((m.id, m.epoch) for m in view.members) if view else []
        finally:
            await node.stop()
        node = Node(tmp_path)
        await node.start()
        try:
            groups = await node.call(lambda c, topics: c.groups())
            reloaded: list[tuple[str, int]] = []
            if groups:
                view = await node.call(lambda c, topics: c.describe("g", topics))
                reloaded = sorted((m.id, m.epoch) for m in view.members)
        finally:
            await node.stop()
        assert rebuilt == reloaded
        return rebuilt

    asyncio.run(scenario())


def test_groups_wait_until_every_replica_runs_a_version_that_reads_their_entries(
    tmp_path: Path,
) -> None:
    """A rolling upgrade: while a replica of the partition advertises a version older than the
    group entries, the leader writes none (refused, naming the node and its version); once
    it advertises a new one, the groups are served."""

    async def scenario() -> None:
        versions = {NODE: "0.1.0"}
        node = Node(tmp_path, versions)
        await node.start()
        try:
            for _ in range(3):
                with pytest.raises(CoordinatorUnavailable, match=r"n1 runs 0\.1\.0"):
                    await node.host.call(0, "g", lambda c, topics: c.groups())
                node.ticker.advance(1)
            assert node.replica.node.log.last_index <= 1  # the leader's no-op, nothing else
            versions[NODE] = "0.2.0"
            assert await node.call(lambda c, topics: c.groups()) == []
        finally:
            await node.stop()

    asyncio.run(scenario())


def test_versions_are_compared_as_numbers() -> None:
    assert (
        reads_group_entries("0.2.0")
        and reads_group_entries("0.10")
        and reads_group_entries("1.0.0")
    )
    assert reads_group_entries("0.1.9") is False
    assert reads_group_entries("") is None and reads_group_entries("dev") is None


def test_queue_calls_wait_until_every_replica_reads_queue_entries(tmp_path: Path) -> None:
    """A rolling upgrade from the version with groups but no queues: the partition's groups are
    served, but a queue call (and a queue join) is refused, naming the node and its version,
    and writes nothing, until every replica advertises a version that reads queue entries."""

    async def scenario() -> None:
        versions = {NODE: "0.2.0"}
        node = Node(tmp_path, versions)
        await node.start()
        try:
            assert await node.call(lambda c, topics: c.groups()) == []  # groups: served
            last = node.replica.node.log.last_index
            for _ in range(3):
                with pytest.raises(CoordinatorUnavailable, match=r"n1 runs 0\.2\.0.*0\.3"):
                    await node.host.call(0, "q", lambda c, topics: c.groups(), queue=True)
                node.ticker.advance(1)
            assert node.replica.node.log.last_index == last  # nothing written
            versions[NODE] = "0.3.0"
            assert await node.host.call(0, "q", lambda c, topics: c.groups(), queue=True) == []
        finally:
            await node.stop()

    asyncio.run(scenario())


def test_versions_that_read_queue_entries() -> None:
    assert (
        reads_queue_entries("0.3.0") and reads_queue_entries("0.10") and reads_queue_entries("1.0")
    )
    assert reads_queue_entries("0.2.9") is False and reads_queue_entries("0.2.0") is False
    assert reads_queue_entries("") is None and reads_queue_entries("dev") is None
