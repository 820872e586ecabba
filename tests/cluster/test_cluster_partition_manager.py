"""The partition manager's opening of new replicas, on a Node that is built but not started
(no server, no control plane): admission in batches, messages for queued groups, and the
campaign preference of new groups."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from cluster import opener as opener_module
from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.node import Node
from raft.codec import encode_message_parts
from raft.types import Role, VoteRequest

PARTITIONS = 30


def _node(tmp_path: Path, node_id: str = "n1") -> Node:
    node = Node(NodeConfig(node_id=node_id, data_dir=str(tmp_path / node_id)))
    Path(node.partitions_dir).mkdir(parents=True)
    assignment = tuple(
        ("n1", "n2", "n3")[p % 3 :] + ("n1", "n2", "n3")[: p % 3] for p in range(PARTITIONS)
    )
    node.topics = {"t": TopicSpec("t", PARTITIONS, 3, assignment=assignment)}
    return node


def test_new_replicas_open_in_batches_while_few_groups_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opener_module, "OPEN_BATCH_REPLICAS", 4)
    monkeypatch.setattr(opener_module, "SETTLING_LIMIT", 8)

    async def scenario() -> None:
        node = _node(tmp_path)
        await node._reconcile_local()
        assert len(node.opener.pending) == PARTITIONS and not node.multiraft.replicas
        await node.opener.open_pending()
        assert len(node.multiraft.replicas) == 8  # two batches, then the limit holds
        await node.opener.open_pending()
        assert len(node.multiraft.replicas) == 8  # nothing settled yet
        for group in list(node.opener.settling)[:4]:
            node.multiraft.replicas[group].node.quiesced = True  # as a quiesced group is
        await node.opener.open_pending()
        assert len(node.multiraft.replicas) == 12
        # a message for a queued group opens it at once, with its assigned members, on the
        # storage thread (never on the event loop: its log may be long), and is delivered to it
        # once it is open, with those that came meanwhile
        threads = []
        open_replica = node.opener.open_replica

        def recording(*args):  # type: ignore[no-untyped-def]
            threads.append(threading.current_thread().name)
            return open_replica(*args)

        node.opener.open_replica = recording  # type: ignore[method-assign]
        votes = [
            b"".join(encode_message_parts(VoteRequest(term, "n3", "n1", 0, 0, True, False)))
            for term in (1, 2)
        ]
        node.opener.open_on_message("t/29", "n3", memoryview(votes[0]))
        assert "t/29" not in node.opener.pending and node.opener.knows("t/29")
        node.opener.open_on_message("t/29", "n3", memoryview(votes[1]))  # opened once only
        deadline = time.monotonic() + 30
        while "t/29" not in node.multiraft.replicas:
            assert time.monotonic() < deadline, "t/29 not opened"
            await asyncio.sleep(0.01)
        assert threads == ["flotilla-storage_0"]
        replica = node.multiraft.replicas["t/29"]
        assert replica.node.configuration.voters == frozenset({"n1", "n2", "n3"})
        delivered = [m for m in node.multiraft._inbox if isinstance(m, tuple)]
        assert delivered == [("n3", [("t/29", votes[0])]), ("n3", [("t/29", votes[1])])]
        await node.multiraft.stop()

    asyncio.run(scenario())


def test_only_the_preferred_replica_of_a_new_group_campaigns_on_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = _node(tmp_path)
        await node._reconcile_local()
        await node.opener.open_pending()
        election_ticks = node.config.election_ticks
        for replica in node.multiraft.replicas.values():
            preferred = node.topics["t"].assignment[replica.partition][0] == "n1"
            for _ in range(2 * election_ticks):  # the longest first timeout of a preferred one
                replica.node.tick()
            campaigned = replica.node.role is not Role.FOLLOWER
            assert campaigned == preferred, replica.group
        await node.multiraft.stop()

    asyncio.run(scenario())
