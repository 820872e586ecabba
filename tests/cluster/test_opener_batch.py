"""Opening a batch of replicas (`ReplicaOpener._open_batch`, on the storage thread) lists each
topic's directory once and opens the replicas it does not hold as new, without a listing of
each; a replica whose directory is there is still looked at as a whole (its markers: a retired
one stays closed, one of an earlier incarnation is wiped), in the same batch as new ones.
Issue 28: a node opens tens of thousands of replicas at a topic's creation or a restart.
A new replica's incarnation is in its log's header (no `TOPIC_UID` file of its own)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cluster import replica_dirs
from cluster.clock import FakeTicker
from cluster.multiraft import MultiRaft, Send
from cluster.opener import RETIRED, TOPIC_UID, ReplicaOpener
from cluster.replica import Replica
from cluster.replica_dirs import topic_uid_in
from cluster.topic_spec import TopicSpec
from raft.codec import decode_message, encode_message
from raft.config import RaftConfig
from raft.storage_log import SegmentedRaftLog
from raft.types import (
    AppendRequest,
    AppendResponse,
    Configuration,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    LogPosition,
    VoteRequest,
    VoteResponse,
)
from storage import FileHandles, LogConfig, SegmentedLog, StateJournal

NODES = ("n1", "n2", "n3")
SPEC = TopicSpec("t", 12, 3, assignment=tuple(NODES for _ in range(12)), uid="a" * 32)
BOOTSTRAP = Configuration(voters=frozenset(NODES))


def _opener(
    root: Path, send: Send = lambda *message: None, spec: TopicSpec = SPEC
) -> ReplicaOpener:
    journal = StateJournal(root / "journal")
    return ReplicaOpener(
        node_id="n1",
        partitions_dir=str(root / "partitions"),
        journal=journal,
        raft_config=RaftConfig(),
        log_config=LogConfig(),
        handles=FileHandles(64),
        multiraft=MultiRaft("n1", send, 0.05, journal),
        topics=lambda: {spec.name: spec},
        clock=lambda: 0.0,
    )


def _counting_listdir(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    real: Callable[[str], list[str]] = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)  # the opener's listings (it calls os.listdir)
    return listed


def _driven_opener(root: Path) -> tuple[ReplicaOpener, FakeTicker, list[tuple[str, object]]]:
    """An opener whose host is started on a fake clock (no tick passes unless the test advances
    it), and the messages it sends, decoded, as (destination, message). In a running loop."""
    ticker = FakeTicker(0.05)
    sent: list[tuple[str, object]] = []
    opener = _opener(
        root, lambda to, group, parts: sent.append((to, decode_message(b"".join(parts))))
    )
    opener.multiraft.ticker = ticker
    opener.multiraft.start()
    return opener, ticker, sent


def _a_first_run(root: Path, *, partitions: int) -> None:
    """A first run of the node: `partitions` replicas of t opened, t/0 elected at term 3 (a
    no-op, its hard state saved), all closed."""
    first = _opener(root)
    opened = first._open_batch([(SPEC, index, BOOTSTRAP) for index in range(partitions)])
    assert isinstance(opened[0], Replica)
    opened[0].log.append([Entry(1, 3, EntryKind.NOOP, 0, b"", 0)])
    first.journal.save_many({"t/0": HardState(term=3, vote="n2", commit=1)})
    _close(opened)
    first.journal.close()


def _close(results: Sequence[object]) -> None:
    for result in results:
        if isinstance(result, Replica):
            result.close()


def test_a_new_topics_batch_lists_the_topic_once_not_each_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opener = _opener(tmp_path)
    listed = _counting_listdir(monkeypatch)
    synced: list[str] = []
    real_sync = replica_dirs.fsync_directory  # type: ignore[attr-defined]

    def fsync_directory(path: str) -> None:
        synced.append(path)
        real_sync(path)

    monkeypatch.setattr(replica_dirs, "fsync_directory", fsync_directory)
    results = opener._open_batch([(SPEC, index, BOOTSTRAP) for index in range(12)])
    assert all(isinstance(result, Replica) for result in results), results
    partitions = str(tmp_path / "partitions")
    assert listed == [os.path.join(partitions, "t")], listed  # the topic's, nothing else
    # the new directories' names are durable before a replica is returned: one fsync of the
    # topic's directory for the batch, and one of the partitions directory (a new topic)
    assert sorted(synced) == [partitions, os.path.join(partitions, "t")], synced
    for index in (0, 11):  # each new replica's log header names its incarnation
        directory = tmp_path / "partitions" / "t" / str(index)
        assert topic_uid_in(str(directory)) == SPEC.uid
        assert not (directory / TOPIC_UID).exists()  # no file of its own: no fsyncs for it
    _close(results)
    opener.journal.close()


def test_replicas_on_disk_are_still_read_whole_beside_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_dir = tmp_path / "partitions" / "t"
    retired = topic_dir / "3"  # retired here: not opened but by a leader adding it back
    retired.mkdir(parents=True)
    (retired / TOPIC_UID).write_text(SPEC.uid)
    (retired / RETIRED).write_text("2 7\n")
    stale = topic_dir / "5"  # of an earlier incarnation of the topic: wiped, opened anew
    (stale / "log").mkdir(parents=True)
    (stale / TOPIC_UID).write_text("b" * 32)
    (stale / "log" / "leftover").write_text("the old incarnation's")
    opener = _opener(tmp_path)
    opener.journal.save_many({"t/5": HardState(term=9, vote="n2", commit=0)})
    listed = _counting_listdir(monkeypatch)
    results = opener._open_batch([(SPEC, index, BOOTSTRAP) for index in range(8)])
    assert results[3] is None, results[3]
    assert isinstance(results[5], Replica) and results[5].node.term == 0, results[5]
    assert not (stale / "log" / "leftover").exists()
    assert topic_uid_in(str(stale)) == SPEC.uid
    assert sorted(listed) == sorted([str(topic_dir), str(retired), str(stale)]), listed
    assert all(isinstance(results[i], Replica) for i in (0, 1, 2, 4, 6, 7)), results
    _close(results)
    opener.journal.close()


def test_a_restarted_replica_asks_who_leads_and_settles_once_it_knows(tmp_path: Path) -> None:
    """A restart opens tens of thousands of replicas of groups that elected long ago, their
    leaders quiesced, a window of `SETTLING_LIMIT` at a time. Each replica with a term asks its
    peers at once (a pre-vote at its own term: `RaftNode.probe_membership`), so the quiesced
    leader wakes and heartbeats now rather than after the replica's election timeout, and it
    counts as settled as soon as it knows its leader, not only once the group quiesces again."""

    async def scenario() -> None:
        _a_first_run(tmp_path, partitions=2)  # t/0 elected (term 3), t/1 never did

        opener, _, sent = _driven_opener(tmp_path)  # no tick passes: no election timeout runs out
        try:
            for index in range(2):
                opener.queue(SPEC, index, BOOTSTRAP)
            await opener.open_pending()
            probe = VoteRequest(3, "n1", "n2", 1, 3, True)
            await _until(lambda: ("n2", probe) in sent, f"{probe} in {sent}")
            assert ("n3", VoteRequest(3, "n1", "n3", 1, 3, True)) in sent, sent
            assert all(isinstance(m, VoteRequest) and m.term == 3 for _, m in sent), sent
            assert set(opener.settling) == {"t/0", "t/1"}
            heartbeat = Heartbeat(3, "n2", "n1", 1, quiesce=False, lease_tick=1)
            opener.multiraft.deliver("n2", [(f"t/0@{SPEC.uid[:16]}", encode_message(heartbeat))])
            replica = opener.multiraft.replicas["t/0"]
            await _until(lambda: replica.node.leader_id == "n2", "the leader heard")
            await opener.open_pending()
            assert not replica.node.quiesced
            assert set(opener.settling) == {"t/1"}, opener.settling  # a new group: until quiet
        finally:
            for group in list(opener.multiraft.replicas):
                opener.multiraft.remove(group)
            await opener.multiraft.stop()

    asyncio.run(scenario())


def test_a_new_groups_leader_quiesces_once_its_members_hold_the_no_op(tmp_path: Path) -> None:
    """Nothing was ever proposed to a new group: its leader quiesces at the first tick after
    every member acknowledged its no-op, not after `quiesce_after_ticks` more ticks of
    heartbeats (ten heartbeats to each member and their answers, for each of 100,000 new
    groups, were most of the messages a topic's creation cost)."""

    async def scenario() -> None:
        opener, ticker, sent = _driven_opener(tmp_path)
        wire = f"t/0@{SPEC.uid[:16]}"

        def deliver(sender: str, message: object) -> None:
            opener.multiraft.deliver(sender, [(wire, encode_message(message))])  # type: ignore[arg-type]

        try:
            opener.queue(SPEC, 0, BOOTSTRAP)  # n1 is t/0's preferred replica: it campaigns
            await opener.open_pending()
            replica = opener.multiraft.replicas["t/0"]
            ticker.advance()
            await _until(lambda: ("n2", VoteRequest(1, "n1", "n2", 0, 0)) in sent, "a campaign")
            deliver("n2", VoteResponse(1, "n2", "n1", True))
            await _until(lambda: replica.node.commit == 0 and _appended(sent), "the no-op")
            for member in ("n2", "n3"):
                deliver(member, AppendResponse(1, member, "n1", 1))
            await _until(lambda: replica.node.commit == 1, "the no-op committed")
            sent.clear()
            for _ in range(2):  # the no-op durable here by the next round, then a tick
                ticker.advance()
                await _until(lambda: not opener.multiraft._inbox, "the round")
                await asyncio.sleep(0.01)
            await _until(lambda: replica.node.quiesced, "quiesced", timeout_s=2.0)
            quiescing = [(to, m) for to, m in sent if isinstance(m, Heartbeat) and m.quiesce]
            assert sorted(to for to, _ in quiescing) == ["n2", "n3"], sent
        finally:
            for group in list(opener.multiraft.replicas):
                opener.multiraft.remove(group)
            await opener.multiraft.stop()

    asyncio.run(scenario())


def _appended(sent: list[tuple[str, object]]) -> bool:
    return any(isinstance(m, AppendRequest) and m.entries for _, m in sent)


def test_a_rebuilding_replica_asks_again_until_it_reaches_its_vote_floor(tmp_path: Path) -> None:
    """A replica rebuilt below its vote floor never campaigns: only its leader can bring it up.
    It used to stop asking once it knew a leader, but a leader that heard nothing from it (its
    answers went nowhere while its node had no route to the leader yet, just restarted) quiesced
    past it as silent, and it then waited for ever (the fresh-clone runs: `[leader]` case of
    `test_a_damaged_replica_is_rebuilt_from_its_peers_and_holds_every_record`). It now asks
    every pass until its log reaches its floor."""

    async def scenario() -> None:
        opener, _, sent = _driven_opener(tmp_path)
        wire = f"t/0@{SPEC.uid[:16]}"
        try:
            opener.queue(SPEC, 0, BOOTSTRAP)
            await opener.open_pending()
            replica = opener.multiraft.replicas["t/0"]
            replica.node.restore_vote_floor(LogPosition(3, 21))  # rebuilt: its log went
            opener.rebuilding.add("t/0")
            heartbeat = encode_message(Heartbeat(3, "n2", "n1", 0))
            opener.multiraft.deliver("n2", [(wire, heartbeat)])
            await _until(lambda: replica.node.leader_id == "n2", "the leader heard")
            sent.clear()
            opener.probe_rebuilding()  # knows its leader, still below its floor: asks again
            await _until(lambda: len(sent) >= 2, f"the probes in {sent}")
            assert {to for to, m in sent if isinstance(m, VoteRequest)} == {"n2", "n3"}, sent
            assert opener.rebuilding == {"t/0"}
        finally:
            for group in list(opener.multiraft.replicas):
                opener.multiraft.remove(group)
            await opener.multiraft.stop()

    asyncio.run(scenario())


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout_s} s"
        await asyncio.sleep(0.001)


def test_a_replica_whose_log_header_names_an_earlier_incarnation_is_wiped(tmp_path: Path) -> None:
    """No `TOPIC_UID` file: the log's header tag says which incarnation the directory holds.
    One of an earlier incarnation of the topic loses its log and hard state; one of this
    incarnation keeps both; one whose header has no tag (made before tags) keeps its log and
    gets a `TOPIC_UID` file."""
    topic_dir = tmp_path / "partitions" / "t"
    for index, tag in ((1, "b" * 32), (2, SPEC.uid), (3, None)):
        with SegmentedLog(topic_dir / str(index) / "log", LogConfig(), tag=tag) as log:
            SegmentedRaftLog(log).append([Entry(1, 1, EntryKind.NOOP, 0, b"", 0)])
    opener = _opener(tmp_path)
    states = {f"t/{index}": HardState(term=9, vote="n2", commit=1) for index in (1, 2, 3)}
    opener.journal.save_many(states)
    results = opener._open_batch([(SPEC, index, BOOTSTRAP) for index in range(4)])
    wiped, kept, untagged = results[1], results[2], results[3]
    assert isinstance(wiped, Replica) and isinstance(kept, Replica), results
    assert isinstance(untagged, Replica), results
    assert (wiped.node.term, wiped.segmented.last_index) == (0, 0)
    assert opener.journal.load("t/1").term == 0
    assert topic_uid_in(str(topic_dir / "1")) == SPEC.uid
    assert (kept.node.term, kept.segmented.last_index) == (9, 1)
    assert (untagged.node.term, untagged.segmented.last_index) == (9, 1)
    assert (topic_dir / "3" / TOPIC_UID).read_text() == SPEC.uid
    assert not (topic_dir / "2" / TOPIC_UID).exists()
    _close(results)
    opener.journal.close()


def test_a_retired_replica_keeps_its_incarnation_once_its_log_is_gone(tmp_path: Path) -> None:
    """Retirement deletes the log, and with it the header naming the incarnation: a
    `TOPIC_UID` file keeps it, so a replica retired in an earlier incarnation of the topic is
    wiped and opened as the new one's (not left closed as retired here)."""
    first = _opener(tmp_path)
    opened = first._open_batch([(SPEC, index, BOOTSTRAP) for index in range(2)])
    retiring = opened[1]
    assert isinstance(retiring, Replica)
    first.retire(retiring)
    _close(opened[:1])
    first.journal.close()
    assert topic_uid_in(str(tmp_path / "partitions" / "t" / "1")) == SPEC.uid
    again = _opener(tmp_path)
    assert again._open_batch([(SPEC, 1, BOOTSTRAP)]) == [None]  # still retired in this one
    again.journal.close()
    newer = TopicSpec("t", 12, 3, assignment=SPEC.assignment, uid="c" * 32)
    later = _opener(tmp_path, spec=newer)
    (reopened,) = later._open_batch([(newer, 1, BOOTSTRAP)])
    assert isinstance(reopened, Replica) and reopened.topic_uid == newer.uid, reopened
    _close([reopened])
    later.journal.close()
