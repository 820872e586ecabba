"""The partition manager's opening of new replicas, on a Node that is built but not started
(no server, no control plane): admission in batches, messages for queued groups, and the
campaign preference of new groups."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import pytest

from cluster import opener as opener_module
from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.node import Node
from cluster.placement import Candidate
from cluster.replica_dirs import topic_uid_in
from raft.codec import decode_message, encode_message_parts
from raft.types import (
    AppendRequest,
    Configuration,
    HardState,
    LogPosition,
    Message,
    Role,
    VoteRequest,
)
from storage.timer_index import INDEX_DIRECTORY

PARTITIONS = 30


def _deliveries(node: Node) -> list[tuple[str, list[tuple[str, bytes | memoryview]]]]:
    """What is delivered to the node's MultiRaft from now on (and still delivered to it)."""
    delivered: list[tuple[str, list[tuple[str, bytes | memoryview]]]] = []
    deliver = node.multiraft.deliver

    def recording(sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        delivered.append((sender, list(messages)))
        deliver(sender, messages)

    node.multiraft.deliver = recording  # type: ignore[method-assign]
    return delivered


def _node(tmp_path: Path, node_id: str = "n1") -> Node:
    node = Node(NodeConfig(node_id=node_id, data_dir=str(tmp_path / node_id)))
    Path(node.partitions_dir).mkdir(parents=True, exist_ok=True)
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
        await node.partitions.reconcile_local()
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

        def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
            threads.append(threading.current_thread().name)
            return open_replica(*args, **kwargs)

        node.opener.open_replica = recording  # type: ignore[method-assign]
        delivered = _deliveries(node)
        votes = [
            b"".join(encode_message_parts(VoteRequest(term, "n3", "n1", 0, 0, True, False)))
            for term in (1, 2)
        ]
        node.opener.open_on_message("t/29", "", "n3", memoryview(votes[0]))
        assert "t/29" not in node.opener.pending and node.opener.knows("t/29")
        node.opener.open_on_message("t/29", "", "n3", memoryview(votes[1]))  # opened once only
        deadline = time.monotonic() + 30
        while "t/29" not in node.multiraft.replicas:
            assert time.monotonic() < deadline, "t/29 not opened"
            await asyncio.sleep(0.01)
        assert threads == ["flotilla-storage"]
        replica = node.multiraft.replicas["t/29"]
        assert replica.node.configuration.voters == frozenset({"n1", "n2", "n3"})
        assert delivered == [("n3", [("t/29", votes[0])]), ("n3", [("t/29", votes[1])])]
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_groups_messages_ask_for_open_in_batches_ahead_of_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node behind its peers hears from many groups it has only queued: they open ahead of
    the queue in batches (`OPEN_BATCH_REPLICAS` per storage-thread call: one fsync per
    directory made, the uid files in parallel), not one storage call each with its own serial
    fsyncs, which held the storage thread (and so the node's answers) for seconds. Each gets
    its own message, and those that came while it opened."""
    monkeypatch.setattr(opener_module, "OPEN_BATCH_REPLICAS", 8)

    async def scenario() -> None:
        node = _node(tmp_path)
        await node.partitions.reconcile_local()
        batches: list[list[str]] = []
        open_batch = node.opener._open_batch

        def recording(batch, *args):  # type: ignore[no-untyped-def]
            batches.append([f"{spec.name}/{index}" for spec, index, _ in batch])
            return open_batch(batch, *args)

        node.opener._open_batch = recording  # type: ignore[method-assign]
        delivered = _deliveries(node)
        asked = [f"t/{p}" for p in range(10)]
        votes = {
            group: b"".join(encode_message_parts(VoteRequest(1, "n2", "n1", 0, 0, True, False)))
            for group in asked
        }
        for group in asked:
            node.opener.open_on_message(group, "", "n2", memoryview(votes[group]))
        node.opener.open_on_message("t/9", "", "n2", memoryview(votes["t/9"]))  # while opening
        assert all(node.opener.knows(g) and g not in node.opener.pending for g in asked)
        deadline = time.monotonic() + 30
        while not all(group in node.multiraft.replicas for group in asked):
            assert time.monotonic() < deadline, sorted(node.multiraft.replicas)
            await asyncio.sleep(0.01)
        assert batches == [asked[:8], asked[8:]]
        assert sorted(delivered) == sorted(
            [("n2", [(group, votes[group])]) for group in asked] + [("n2", [("t/9", votes["t/9"])])]
        )
        assert len(node.opener.pending) == PARTITIONS - len(asked)
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_a_group_asked_for_as_the_last_opening_task_ends_is_opened(tmp_path: Path) -> None:
    """A message for a group not hosted, arriving after the task that opens asked-for groups
    has returned but before its done callback has run (it is still in the set of tasks): the
    group is opened all the same. Seen in a fresh-clone run: two leaders re-added this node to
    two groups 3 ms apart; the second group waited in `opening` for ever, its leader's
    messages held, and the learner never caught up."""

    async def scenario() -> None:
        node = _node(tmp_path)

        async def nothing() -> None:
            return None

        finished = asyncio.get_running_loop().create_task(nothing())
        await finished
        node.opener._opening_tasks.add(finished)  # returned; its done callback not run yet
        vote = b"".join(encode_message_parts(VoteRequest(1, "n3", "n1", 0, 0, True, False)))
        node.opener.open_on_message("t/7", "", "n3", memoryview(vote))
        deadline = time.monotonic() + 30
        while "t/7" not in node.multiraft.replicas:
            assert time.monotonic() < deadline, "t/7 not opened"
            await asyncio.sleep(0.01)
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_the_preferred_replica_of_a_new_group_campaigns_at_its_first_tick(tmp_path: Path) -> None:
    """The preferred replica (first in placement order) of a new group campaigns at its first
    tick, for term 1 without a pre-vote (nothing to disrupt at term 0); the others wait more
    than the longest first timeout, so thousands of new groups elect at once, unsplit."""

    async def scenario() -> None:
        node = _node(tmp_path)
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        election_ticks = node.config.election_ticks
        for replica in node.multiraft.replicas.values():
            preferred = node.topics["t"].assignment[replica.partition][0] == "n1"
            replica.node.tick()
            assert (replica.node.role is Role.CANDIDATE) == preferred, replica.group
            if preferred:
                assert replica.node.term == 1, replica.group
                continue
            for _ in range(2 * election_ticks):  # the longest first timeout of a preferred one
                replica.node.tick()
            assert replica.node.role is Role.FOLLOWER, replica.group
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def _encoded(message: Message) -> memoryview:
    return memoryview(b"".join(encode_message_parts(message)))


async def _wait(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def test_a_removed_replica_retires_keeping_its_term_and_vote(tmp_path: Path) -> None:
    """Replica GC: once told it was removed, the replica's log is deleted and a marker left; its
    term and vote stay in the journal. Only a leader's message opens it again, and then with an
    empty configuration (never the topic's initial assignment) and the term and vote it kept."""

    async def scenario() -> None:
        node = _node(tmp_path)
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        replica = node.multiraft.replicas["t/0"]
        directory = Path(replica.directory)
        assert (directory / "log").is_dir()
        node.journal.save_many({"t/0": HardState(7, "n2", 0)})  # as an election leaves it
        replica.node.restore_vote_floor(LogPosition(7, 12))  # as if it had been wiped before
        replica.node.removed_at = 5  # as a member's `Removed` sets it
        # a timer log's replica keeps its index beside its log: it goes with the log
        (directory / INDEX_DIRECTORY).mkdir()
        (directory / INDEX_DIRECTORY / "state").write_bytes(b"an index of the retired log")
        node.multiraft.on_round({replica})  # as after a round
        await _wait((directory / opener_module.RETIRED).exists, "the marker")
        await _wait(lambda: not node.collector.retiring, "the retirement")
        assert "t/0" not in node.multiraft.replicas and not (directory / "log").exists()
        assert not (directory / INDEX_DIRECTORY).exists(), "the retired replica's timer index"
        assert node.journal.load("t/0") == HardState(7, "n2", 0)
        retired = node.metrics.registry.get_sample_value(
            "flotilla_replicas_retired_total", {"node": "n1"}
        )
        assert retired == 1.0

        node.opener.retired.clear()  # as after a restart: the marker alone must keep it shut
        (directory / INDEX_DIRECTORY).mkdir()  # as if a crash interrupted the retirement
        node.partitions.local_checked_at = 0.0
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        assert "t/0" not in node.multiraft.replicas and "t/0" in node.opener.retired
        assert not (directory / INDEX_DIRECTORY).exists(), "an interrupted retirement finished"
        node.opener.open_on_message(
            "t/0", "", "n3", _encoded(VoteRequest(8, "n3", "n1", 9, 7, True))
        )
        assert "t/0" not in node.opener.opening  # a removed peer's campaign opens nothing

        append = _encoded(AppendRequest(8, "n2", "n1", 40, 7, 40))
        delivered = _deliveries(node)
        node.opener.open_on_message("t/0", "", "n2", append)
        await _wait(lambda: "t/0" in node.multiraft.replicas, "t/0 re-opened for its leader")
        back = node.multiraft.replicas["t/0"]
        assert (back.node.term, back.node.vote) == (7, "n2")
        assert back.node.vote_floor == LogPosition(7, 12)  # it votes as if it held that log
        assert back.node.configuration == Configuration()  # not the initial assignment
        assert (directory / opener_module.REJOINED).exists()
        assert not (directory / opener_module.RETIRED).exists()
        assert "t/0" not in node.opener.retired
        assert delivered == [("n2", [("t/0", bytes(append))])]
        # reopened after a restart, it still does not take the initial assignment
        node.multiraft.remove("t/0")
        spec = node.topics["t"]
        bootstrap = Configuration(voters=frozenset(spec.assignment[0]))
        again = await node.multiraft.run_storage(
            lambda: node.opener.open_replica(spec, 0, bootstrap)
        )
        assert again is not None and again.node.configuration == Configuration()  # type: ignore[attr-defined]
        assert again.node.vote_floor == LogPosition(7, 12)  # type: ignore[attr-defined]
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_a_topic_created_again_never_gets_the_earlier_one_s_replicas(tmp_path: Path) -> None:
    """A topic deleted and created again under the same name has a new uid. Replicas of the
    earlier one — hosted, or found on disk by a node that was away — are wiped (files, markers,
    hard state), and the new topic's open empty, with its own initial assignment."""

    def incarnation(node: Node, uid: str) -> None:
        spec = node.topics["t"]
        node.topics = {"t": TopicSpec("t", spec.partitions, 3, assignment=spec.assignment, uid=uid)}
        node.partitions.local_checked_at = 0.0

    async def first_life() -> None:
        node = _node(tmp_path)
        incarnation(node, "old")
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        replica = node.multiraft.replicas["t/0"]
        assert topic_uid_in(replica.directory) == "old"
        node.journal.save_many({"t/0": HardState(9, "n2", 0), "t/1": HardState(4, None, 0)})
        Path(replica.directory, "stale").write_text("from the earlier topic")
        # t/1 was retired in the earlier topic
        t1 = node.multiraft.replicas["t/1"]
        t1.node.removed_at = 3
        node.multiraft.on_round({t1})  # as after a round
        await _wait(
            lambda: not node.collector.retiring and "t/1" in node.opener.retired, "t/1 retired"
        )

        incarnation(node, "new")  # while this node runs: the hosted replicas go at once
        await node.partitions.reconcile_local()
        assert "t/0" not in node.multiraft.replicas or node.multiraft.replicas["t/0"] is not replica
        await node.opener.open_pending()
        fresh = node.multiraft.replicas["t/0"]
        assert fresh is not replica and fresh.topic_uid == "new"
        assert (fresh.node.term, fresh.node.vote, fresh.segmented.last_index) == (0, None, 0)
        assert not Path(fresh.directory, "stale").exists()
        assert "t/1" in node.multiraft.replicas  # the retirement was the earlier topic's
        assert node.multiraft.replicas["t/1"].node.configuration.voters == {"n1", "n2", "n3"}
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    async def after_a_restart() -> None:
        node = _node(tmp_path)  # the same data directory, now with a third incarnation
        replica_dir = Path(node.opener.replica_dir("t", 2))
        assert topic_uid_in(str(replica_dir)) == "new"  # its log's header (no file of its own)
        node.journal.save_many({"t/2": HardState(6, "n3", 0)})
        incarnation(node, "newest")
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        again = node.multiraft.replicas["t/2"]
        assert (again.node.term, again.node.vote) == (0, None)
        assert topic_uid_in(str(replica_dir)) == "newest"
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(first_life())
    asyncio.run(after_a_restart())


def test_a_message_of_another_incarnation_of_the_topic_opens_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = _node(tmp_path)
        spec = node.topics["t"]
        uid = "a1" * 16
        node.topics = {"t": TopicSpec("t", spec.partitions, 3, assignment=spec.assignment, uid=uid)}
        append = _encoded(AppendRequest(2, "n2", "n1", 0, 0, 0))
        node.opener.open_on_message("t/5", "b2" * 8, "n2", append)  # the topic created again
        assert not node.opener.opening and "t/5" not in node.multiraft.replicas
        node.opener.open_on_message("t/5", uid[:16], "n2", append)
        await _wait(lambda: "t/5" in node.multiraft.replicas, "t/5 opened for its leader")
        assert node.multiraft.replicas["t/5"].wire_group == f"t/5@{uid[:16]}"
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_quiesced_followers_placement_no_longer_names_probe_their_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        node = _node(tmp_path)
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        await node.opener.open_pending()
        replicas = list(node.multiraft.replicas.values())
        assert len(replicas) == PARTITIONS
        for replica in replicas[:-1]:
            replica.node.quiesced = True  # as a follower of a quiesced group is
        placed = [Candidate(n) for n in ("n1", "n2", "n3")]
        elsewhere = [Candidate(n) for n in ("n2", "n3", "n4", "n5")]
        monkeypatch.setattr(node.collector, "placement_candidates", lambda: placed)
        assert await node.collector.probe_unplaced() == 0  # every partition still placed here
        monkeypatch.setattr(node.collector, "placement_candidates", lambda: elsewhere)
        sent: list[Message] = []
        node.multiraft.send = lambda to, group, parts: sent.append(decode_message(b"".join(parts)))
        assert await node.collector.probe_unplaced() == PARTITIONS - 1  # not the one still ticking
        await node.multiraft.run_round()
        probes = [m for m in sent if isinstance(m, VoteRequest)]
        assert len(probes) == 2 * (PARTITIONS - 1)  # to its two fellow voters each
        assert all(m.pre_vote and m.term == 0 and m.sender == "n1" for m in probes)
        assert all(r.node.quiesced and r.node.term == 0 for r in replicas[:-1])
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())


def test_a_batch_of_new_replicas_is_hosted_with_its_topic_uid_written(tmp_path: Path) -> None:
    """Every new replica's log header names its topic's incarnation before it is hosted (and
    is durable with its first flush): a replica that acknowledged anything must never be
    taken for another incarnation's."""

    async def scenario() -> None:
        node = _node(tmp_path)
        spec = node.topics["t"]
        node.topics = {"t": dataclasses.replace(spec, uid="ab" * 16)}
        hosted: list[str] = []
        add = node.multiraft.add

        def checking(replica):  # type: ignore[no-untyped-def]
            hosted.append(topic_uid_in(replica.directory) or "missing")
            add(replica)

        node.multiraft.add = checking  # type: ignore[method-assign]
        await node.partitions.reconcile_local()
        await node.opener.open_pending()
        assert len(hosted) == PARTITIONS and set(hosted) == {"ab" * 16}, hosted
        await node.multiraft.stop()
        node.data_dir_lock.release()  # as the process ending would

    asyncio.run(scenario())
