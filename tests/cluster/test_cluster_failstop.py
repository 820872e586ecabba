"""Fail-stop on storage errors, at the MultiRaft level: a failed journal write or log fsync stops
the node (the injected exit observes it), no Raft message leaves for the state whose persist
failed, and every future of the failed round (and any later one) is settled with the error."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import open_replica

from cluster.failstop import (
    FAIL_STOP_EXIT_CODE,
    FailStop,
    NodeFailStopped,
    disk_failure,
    storage_failure,
)
from cluster.multiraft import MultiRaft, Proposal
from cluster.replica import Replica, Waiter
from raft.codec import decode_message, encode_message
from raft.types import AppendRequest, Entry, EntryKind, Heartbeat
from storage import CorruptEntry, HardState, StateJournal, StorageFailed

GROUP = "t/0"


class _FailingJournal(StateJournal):
    """A real state journal on a disk that fills up once `failing` is set: its write fails
    with ENOSPC, as the OS would report it, and nothing is recorded."""

    failing = False

    def save_many(self, changes: Mapping[str, HardState | None]) -> None:
        if self.failing and changes:
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        super().save_many(changes)


def _host(
    tmp_path: Path,
) -> tuple[MultiRaft, Replica, _FailingJournal, list[object], list[int]]:
    sent: list[object] = []
    journal = _FailingJournal(tmp_path / "journal")
    multiraft = MultiRaft(
        "b", lambda to, group, parts: sent.append(decode_message(b"".join(parts))), 0.05, journal
    )
    exits: list[int] = []
    multiraft.fail_stop = FailStop(exit=exits.append)
    replica = open_replica(tmp_path, GROUP)
    multiraft.add(replica)
    return multiraft, replica, journal, sent, exits


async def _round(multiraft: MultiRaft) -> None:
    """One round, as the driver runs it (which logs a failed round and goes on)."""
    with contextlib.suppress(Exception):
        await multiraft.run_round()


def test_a_failed_journal_write_stops_the_node_before_it_answers_at_the_new_term(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        multiraft, _, journal, sent, exits = _host(tmp_path)
        await _round(multiraft)
        journal.failing = True
        # a leader of term 5: the term must be durable before the node answers at it
        for _ in range(3):
            multiraft.deliver("a", [(GROUP, encode_message(Heartbeat(5, "a", "b", 0)))])
            await _round(multiraft)
        assert journal.load(GROUP).term == 0
        answered = [m for m in sent if getattr(m, "term", 0) >= 5]
        assert not answered, f"answered at term 5 while the journal holds term 0: {answered}"
        assert exits == [FAIL_STOP_EXIT_CODE]
        await multiraft.stop()

    asyncio.run(scenario())


def test_a_failed_log_fsync_sends_nothing_and_settles_every_future_of_the_round(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        multiraft, replica, _, sent, exits = _host(tmp_path)
        await _round(multiraft)
        fsyncs: list[str] = []

        def failing_flush() -> None:  # the log's fsync fails as a dying disk's does
            fsyncs.append("fsync")
            raise OSError(errno.EIO, "Input/output error", replica.segmented.directory)

        replica.segmented.flush = failing_flush  # type: ignore[method-assign]
        entry = Entry(1, 1, EntryKind.NORMAL, 0, b"", 0)
        append = AppendRequest(1, "a", "b", 0, 0, 0, (entry,))
        multiraft.deliver("a", [(GROUP, encode_message(append))])
        # the partition manager's retention waits on work queued for the same round
        retention = multiraft.maintain(lambda: 0)
        await _round(multiraft)
        assert fsyncs == ["fsync"], "a failed fsync is never retried"
        assert not sent, f"sent for a log whose fsync failed: {sent}"
        done, _ = await asyncio.wait([retention], timeout=5)
        assert done, "the partition manager's future of the failed round never settles"
        assert isinstance(retention.exception(), NodeFailStopped)
        assert exits == [FAIL_STOP_EXIT_CODE]
        # and every later one settles at once: nothing waits on a node that stopped
        later = multiraft.maintain(lambda: 0)
        waiter = Waiter(asyncio.get_running_loop().create_future())
        multiraft.propose(Proposal(replica, b"x", 1, 0, waiter))
        await _round(multiraft)
        pending: list[asyncio.Future[Any]] = [later, waiter.future]
        done, _ = await asyncio.wait(pending, timeout=5)
        assert len(done) == 2, "a future queued after the fail-stop never settles"
        assert isinstance(later.exception(), NodeFailStopped)
        assert waiter.future.exception() is not None
        assert fsyncs == ["fsync"] and not sent
        await multiraft.stop()

    asyncio.run(scenario())


def test_what_counts_as_a_disk_failure() -> None:
    eio = OSError(errno.EIO, "Input/output error")
    denied = PermissionError(errno.EACCES, "Permission denied")
    wrapped = RuntimeError("while appending")
    wrapped.__cause__ = eio
    failed = StorageFailed("log x: flush failed (short write)", None)
    # the persist path stops on any OSError, wherever it is in the chain
    assert storage_failure(eio) is eio and storage_failure(wrapped) is eio
    assert storage_failure(denied) is denied and storage_failure(ValueError("x")) is None
    # elsewhere (open, step) only the device's own failures, and storage's failed write
    assert disk_failure(wrapped) is eio and disk_failure(failed) is failed
    assert disk_failure(denied) is None and disk_failure(CorruptEntry("bad entry")) is None
