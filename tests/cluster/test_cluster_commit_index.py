"""The commit index is saved lazily, off the hot path: not with the Ready that learnt it, but by
the periodic save (and at a graceful stop), with the term and vote already durable; a replica
reopened from it starts at its high watermark before it hears a leader."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from cluster.clock import FakeTicker
from cluster.multiraft import MultiRaft
from cluster.replica import COMMIT_SAVE_INTERVAL_S, Replica
from proto.records import encode_batch
from raft.codec import encode_message
from raft.config import RaftConfig
from raft.types import AppendRequest, Configuration, Entry, EntryKind, Heartbeat
from storage import FileHandles, HardState, LogConfig, StateJournal

GROUP = "t/0"


def _open(root: Path, hard_state: HardState) -> Replica:
    return Replica.open(
        node_id="b",
        topic="t",
        partition=0,
        directory=str(root / "t" / "0"),
        bootstrap=Configuration(voters=frozenset({"a", "b", "c"})),
        hard_state=hard_state,
        raft_config=RaftConfig(),
        log_config=LogConfig(),
        handles=FileHandles(16),
        rng=random.Random(1),
    )


def _batch(count: int) -> bytes:
    return encode_batch([(None, b"v", None, 0)] * count)


def test_the_commit_index_is_saved_lazily_and_restores_the_high_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = StateJournal(tmp_path / "journal")
        multiraft = MultiRaft("b", lambda to, group, parts: None, 0.05, journal)
        replica = _open(tmp_path, HardState())
        multiraft.add(replica)
        await multiraft.run_round()
        entries = (
            Entry(1, 1, EntryKind.NOOP, 0, b""),
            Entry(2, 1, EntryKind.NORMAL, 3, _batch(3)),
            Entry(3, 1, EntryKind.NORMAL, 2, _batch(2)),
        )
        multiraft.deliver(
            "a", [(GROUP, encode_message(AppendRequest(1, "a", "b", 0, 0, 0, entries)))]
        )
        await multiraft.run_round()
        assert journal.load(GROUP) == HardState(1, None, 0)  # the term, saved before answering
        multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 3)))])
        await multiraft.run_round()
        assert replica.high_watermark == 5
        assert journal.load(GROUP).commit == 0, "a commit alone is not saved on the hot path"
        saving = multiraft.save_commits_soon()
        assert saving is not None
        await multiraft.run_round()
        assert saving.done() and journal.load(GROUP) == HardState(1, None, 3)  # term, vote kept
        saved_again = journal.states()
        assert multiraft.save_commits_soon() is None  # nothing moved: nothing to write
        assert journal.states() == saved_again
        await multiraft.stop()

        reopened_journal = StateJournal(tmp_path / "journal")
        reopened = _open(tmp_path, reopened_journal.load(GROUP))
        try:
            assert reopened.high_watermark == 5 and reopened.node.leader_id is None
            assert [b.record_count for b in reopened.read_committed(0, 100, 1 << 20)] == [3, 2]
            # a read from the middle of a batch counts only the records it asked for: offsets
            # 2 and 3 span both batches (the first's earlier records do not fill max_records)
            assert [b.record_count for b in reopened.read_committed(2, 2, 1 << 20)] == [3, 2]
            assert [b.record_count for b in reopened.read_committed(2, 1, 1 << 20)] == [3]
        finally:
            reopened.close()
            reopened_journal.close()

    asyncio.run(scenario())


def test_a_replica_removed_before_the_save_runs_is_not_saved(tmp_path: Path) -> None:
    """A replica removed (retired, deleted) after the save was queued keeps whatever its
    removal left in the journal: the save does not bring a forgotten group back."""

    async def scenario() -> None:
        journal = StateJournal(tmp_path / "journal")
        multiraft = MultiRaft("b", lambda to, group, parts: None, 0.05, journal)
        replica = _open(tmp_path, HardState())
        multiraft.add(replica)
        entries = (Entry(1, 1, EntryKind.NOOP, 0, b""),)
        append = AppendRequest(1, "a", "b", 0, 0, 0, entries)
        multiraft.deliver("a", [(GROUP, encode_message(append))])
        await multiraft.run_round()
        multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 1)))])
        await multiraft.run_round()
        assert replica.node.applied_index == 1 and journal.load(GROUP).commit == 0
        saving = multiraft.save_commits_soon()
        assert saving is not None, "the save is queued while the replica is hosted"
        multiraft.remove(GROUP)
        journal.forget([GROUP])
        await multiraft.run_round()
        assert saving.done() and GROUP not in journal.states()
        await multiraft.stop()
        replica.close()

    asyncio.run(scenario())


def test_the_commit_index_is_saved_once_a_save_interval_of_ticks_has_passed(
    tmp_path: Path,
) -> None:
    """On a fake clock, through the driver's own rounds: the periodic save comes with the tick
    that completes COMMIT_SAVE_INTERVAL_S, not one tick before."""

    async def scenario() -> None:
        tick_s = 0.05
        ticker = FakeTicker(tick_s)
        journal = StateJournal(tmp_path / "journal")
        multiraft = MultiRaft("b", lambda to, group, parts: None, tick_s, journal, ticker=ticker)
        replica = _open(tmp_path, HardState())
        multiraft.add(replica)
        multiraft.start()
        try:
            entries = (
                Entry(1, 1, EntryKind.NOOP, 0, b""),
                Entry(2, 1, EntryKind.NORMAL, 3, _batch(3)),
            )
            append = AppendRequest(1, "a", "b", 0, 0, 0, entries)
            multiraft.deliver("a", [(GROUP, encode_message(append))])
            await multiraft.maintain(lambda: None)  # done with the append's disk work
            assert journal.load(GROUP) == HardState(1, None, 0)  # the term, before answering
            multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 2)))])
            deadline = asyncio.get_running_loop().time() + 10
            while replica.high_watermark != 3:
                assert asyncio.get_running_loop().time() < deadline, "the commit was not applied"
                await asyncio.sleep(0.001)
            ticks_per_save = round(COMMIT_SAVE_INTERVAL_S / tick_s)
            for _ in range(ticks_per_save - 1):
                # the leader's heartbeats keep the follower from campaigning as time passes
                multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 2)))])
                ticker.advance(1)
            await multiraft.maintain(lambda: None)  # after any save those ticks queued
            assert journal.load(GROUP).commit == 0, "saved before the interval had passed"
            ticker.advance(1)
            await multiraft.maintain(lambda: None)
            assert journal.load(GROUP) == HardState(1, None, 2)
            # the save looks only at the replicas a Ready applied since: one saved already
            # (and passed over by a save since), whose commit then moves again, is saved again
            for _ in range(ticks_per_save):
                multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 2)))])
                ticker.advance(1)
            await multiraft.maintain(lambda: None)
            more = (Entry(3, 1, EntryKind.NORMAL, 2, _batch(2)),)
            append = AppendRequest(1, "a", "b", 2, 1, 2, more)
            multiraft.deliver("a", [(GROUP, encode_message(append))])
            await multiraft.maintain(lambda: None)
            multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 3)))])
            while replica.high_watermark != 5:
                assert asyncio.get_running_loop().time() < deadline, "the commit was not applied"
                await asyncio.sleep(0.001)
            for _ in range(ticks_per_save):
                multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(1, "a", "b", 3)))])
                ticker.advance(1)
            await multiraft.maintain(lambda: None)
            assert journal.load(GROUP) == HardState(1, None, 3)
        finally:
            await multiraft.stop()

    asyncio.run(scenario())
