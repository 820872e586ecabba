"""One bad group does not take down its neighbours: an unexpected error in one group's step, or
in opening one replica, quarantines that replica (stopped, not voting, reported with its reason
in Health and the metrics) while every other group's inputs of the round are handled."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from harness import open_replica, wait_until
from prometheus_client import generate_latest

from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.failstop import FailStop
from cluster.local import LocalCluster
from cluster.multiraft import MultiRaft, Proposal
from cluster.node import Node
from cluster.replica import Waiter
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from raft.codec import decode_message, encode_message
from raft.errors import LogError, NotLeader
from raft.types import (
    AppendRequest,
    Entry,
    EntryKind,
    Heartbeat,
    Message,
    VoteRequest,
    VoteResponse,
)
from storage import CorruptEntry, StateJournal

PARTITIONS = 12


def test_an_error_in_one_groups_step_quarantines_it_and_spares_the_others(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        sent: list[tuple[str, str, object]] = []
        multiraft = MultiRaft(
            "b",
            lambda to, group, parts: sent.append((to, group, decode_message(b"".join(parts)))),
            0.05,
            StateJournal(tmp_path / "journal"),
        )
        exits: list[int] = []
        multiraft.fail_stop = FailStop(exit=exits.append)
        bad, good = open_replica(tmp_path, "t/0"), open_replica(tmp_path, "t/1")
        multiraft.add(bad)
        multiraft.add(good)
        await multiraft.run_round()

        def corrupt_step(message: Message) -> None:  # the fault: a bug or a corrupt entry met
            raise CorruptEntry(f"entry 7 of {bad.group} fails its checksum")

        bad.node.step = corrupt_step  # type: ignore[method-assign]
        bad_waiter = Waiter(asyncio.get_running_loop().create_future())
        bad.waiters[7] = bad_waiter  # a produce waiting on the bad group
        # one round: the bad group's message first, then the good group's vote and proposal
        multiraft.deliver("a", [("t/0", encode_message(Heartbeat(2, "a", "b", 0)))])
        multiraft.deliver("a", [("t/1", encode_message(VoteRequest(1, "a", "b", 0, 0)))])
        waiter = Waiter(asyncio.get_running_loop().create_future())
        multiraft.propose(Proposal(good, b"x", 1, 0, waiter))
        try:
            await multiraft.run_round()
        except Exception as error:  # the driver would log it and go on
            print(f"the round failed: {error!r}")
        assert ("a", "t/1", VoteResponse(1, "b", "a", True, False)) in sent, (
            f"the good group's vote was dropped with the bad group's round: {sent}"
        )
        assert waiter.future.done() and isinstance(waiter.future.exception(), NotLeader)
        assert exits == [], "a bug in one group is no reason to stop the node"
        # the bad group: stopped (not hosted, so not stepped, ticked or voting), its produce
        # waiters settled, reported with its reason
        assert "t/0" not in multiraft.replicas and "t/1" in multiraft.replicas
        assert bad_waiter.future.done() and bad_waiter.future.exception() is not None
        [quarantined] = multiraft.quarantine.entries()
        assert quarantined.group == "t/0"
        assert "CorruptEntry" in quarantined.reason and "entry 7 of t/0" in quarantined.reason
        # its later messages are dropped, never answered; the good group goes on
        sent.clear()
        multiraft.deliver("a", [("t/0", encode_message(VoteRequest(3, "a", "b", 0, 0)))])
        multiraft.deliver("a", [("t/1", encode_message(Heartbeat(1, "a", "b", 0)))])
        await multiraft.run_round()
        assert [group for _, group, _ in sent] == ["t/1"]
        await multiraft.stop()

    asyncio.run(scenario())


def test_an_error_in_one_groups_write_quarantines_it_and_the_others_persist(
    tmp_path: Path,
) -> None:
    """Not a disk error (those stop the node) but a bug in one group's write: its messages are
    never sent, the other groups' writes are group-committed and their answers go out."""

    async def scenario() -> None:
        sent: list[tuple[str, object]] = []
        journal = StateJournal(tmp_path / "journal")
        multiraft = MultiRaft(
            "b", lambda to, group, parts: sent.append((group, decode_message(b"".join(parts)))),
            0.05, journal,
        )  # fmt: skip
        exits: list[int] = []
        multiraft.fail_stop = FailStop(exit=exits.append)
        bad, good = open_replica(tmp_path, "t/0"), open_replica(tmp_path, "t/1")
        multiraft.add(bad)
        multiraft.add(good)
        await multiraft.run_round()

        def broken_append(entries: object) -> None:
            raise LogError("append starts at index 9, expected 1")  # the fault: a bug

        bad.log.append = broken_append  # type: ignore[method-assign]
        entry = Entry(1, 1, EntryKind.NORMAL, 0, b"", 0)
        multiraft.deliver(
            "a",
            [
                ("t/0", encode_message(AppendRequest(1, "a", "b", 0, 0, 0, (entry,)))),
                ("t/1", encode_message(VoteRequest(1, "a", "b", 0, 0))),
            ],
        )
        await multiraft.run_round()
        assert sent == [("t/1", VoteResponse(1, "b", "a", True, False))]
        assert journal.load("t/1").vote == "a" and exits == []
        assert [q.group for q in multiraft.quarantine.entries()] == ["t/0"]
        assert "t/0" not in multiraft.replicas
        await multiraft.stop()

    asyncio.run(scenario())


def _node(tmp_path: Path) -> Node:
    node = Node(NodeConfig(node_id="n1", data_dir=str(tmp_path / "n1")))
    Path(node.partitions_dir).mkdir(parents=True, exist_ok=True)
    assignment = tuple(("n1", "n2", "n3") for _ in range(PARTITIONS))
    node.topics = {"t": TopicSpec("t", PARTITIONS, 3, assignment=assignment)}
    return node


def test_one_unopenable_replica_does_not_stop_the_others_of_its_batch(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = _node(tmp_path)
        # t/3's directory is damaged: its log directory is a file (an unreadable replica)
        damaged = Path(node.opener.replica_dir("t", 3))
        damaged.mkdir(parents=True)
        (damaged / "log").write_bytes(b"not a log directory")
        await node.partitions.reconcile_local()
        assert len(node.opener.pending) == PARTITIONS
        try:
            await node.opener.open_pending()
        except Exception as error:  # the partition manager would log it and go on
            print(f"opening the batch failed: {error!r}")
        opened = set(node.multiraft.replicas)
        assert opened == {f"t/{p}" for p in range(PARTITIONS) if p != 3}, (
            f"one unopenable replica stopped the others of its batch: opened {sorted(opened)}"
        )
        [quarantined] = node.multiraft.quarantine.entries()
        assert quarantined.group == "t/3" and "t/3" in quarantined.reason
        assert not node.fail_stop.stopped
        # not opened again: neither by the partition manager nor by a peer's message
        assert node.opener.knows("t/3")
        await node.partitions.reconcile_local()
        assert "t/3" not in node.opener.pending
        vote = encode_message(VoteRequest(1, "n2", "n1", 0, 0))
        node.opener.open_on_message("t/3", "", "n2", vote)
        assert "t/3" not in node.opener.opening
        # reported: Health, metrics
        health = node.health()
        assert [(q.group, q.reason) for q in health.quarantined] == [("t/3", quarantined.reason)]
        scrape = _scrape(node)
        assert 'flotilla_replicas_quarantined{node="n1"} 1.0' in scrape, scrape
        await node.multiraft.stop()

    asyncio.run(scenario())


def _scrape(node: Node) -> str:
    return generate_latest(node.metrics.registry).decode()


@pytest.mark.integration
def test_a_node_quarantines_its_damaged_replica_and_serves_the_others(tmp_path: Path) -> None:
    """A real node restarts with one replica's directory damaged: that replica is quarantined
    (Health, the metric, `flotilla status`), the node's other replicas open and serve, and the
    damaged partition goes on with its other members."""
    config = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    with LocalCluster(tmp_path, 3, config_text=config) as cluster:
        cluster.start()
        with Client(cluster.addresses(), timeout_s=30) as client:
            client.create_topic("q", partitions=2, replication_factor=3)
            for partition in (0, 1):
                client.produce("q", b"before", partition=partition)
            spec = cluster.nodes["n1"]
            cluster.stop("n1")
            log_dir = spec.data_dir / "partitions" / "q" / "0" / "log"
            assert log_dir.is_dir()
            shutil.rmtree(log_dir)
            log_dir.write_bytes(b"damaged")  # the log directory is now a file
            cluster.start("n1")
            with grpc.insecure_channel(spec.address) as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                health: list[pb.HealthResponse] = []

                def opened() -> bool:
                    health.append(stub.Health(pb.HealthRequest(), timeout=5))
                    return health[-1].partitions >= 1 and len(health[-1].quarantined) >= 1

                wait_until(opened, 30, "n1 opening q/1 and quarantining q/0", lambda: health[-1])
            assert health[-1].partitions == 1
            [quarantined] = health[-1].quarantined
            assert quarantined.group == "q/0" and "NotALogDirectory" in quarantined.reason
            # the other partition is served by n1; the damaged one by its other members
            wait_until(
                lambda: [r.value for r in client.read("q", 1, 0, 10, replica="n1")] == [b"before"],
                30,
                "n1 serving q/1",
            )
            assert client.produce("q", b"after", partition=0).offset == 1
        env = {**os.environ, "FLOTILLA_BOOTSTRAP": cluster.bootstrap}
        shown = subprocess.run(
            [sys.executable, "-m", "flotilla", "status", "--json"],
            env=env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        reported = json.loads(shown.stdout)["quarantined"]
        assert [(q["node"], q["group"]) for q in reported] == [("n1", "q/0")], reported
        table = subprocess.run(
            [sys.executable, "-m", "flotilla", "status"],
            env={**env, "COLUMNS": "200"}, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        assert b"quarantined replicas" in table.stdout and b"q/0" in table.stdout
