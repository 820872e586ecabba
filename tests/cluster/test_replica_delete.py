"""Deleting the replica of a topic incarnation that is gone (`cluster.opener.delete_replica`)
must not take the files or the hard state of the next incarnation's replica, which lives in
the same directory under the same group name.

Seen in CI: a topic deleted and created again; a node that had not seen the delete learned the
new incarnation, stopped the old replicas and deleted them one by one, awaiting each. While it
waited, a message from the new incarnation's leader opened the new replica of a partition whose
old replica was still to be deleted (`ReplicaOpener.open_on_message`); the deletion then removed
the new replica's files, and its next append failed (ENOENT): the node stopped (fail-stop).
Both halves are fixed: the partition manager queues every deletion in one storage-thread call
before it awaits anything (the storage thread runs jobs in order), and `delete_replica` takes
nothing that belongs to another incarnation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness import open_replica

from cluster.opener import TOPIC_UID, delete_replica
from cluster.replica import Replica
from cluster.replica_dirs import topic_uid_in
from raft.types import HardState
from storage import SegmentedLog
from storage.state_journal import StateJournal


def _incarnation(root: Path, uid: str, where: str) -> Replica:
    """t/0 of the incarnation `uid`, which the directory names in a `TOPIC_UID` file (`where`
    "file", as before log headers carried it) or in its log's header ("header")."""
    if where == "header":  # the log made first, tagged, as the opener's new replicas are
        SegmentedLog(root / "t" / "0" / "log", tag=uid).close()
    replica = open_replica(root, "t/0")
    replica.set_topic_uid(uid)
    if where == "file":
        (root / "t" / "0" / TOPIC_UID).write_text(uid)
    return replica


@pytest.mark.parametrize("where", ["file", "header"])
def test_deleting_an_old_incarnation_spares_the_new_one_in_its_directory(
    tmp_path: Path, where: str
) -> None:
    journal = StateJournal(tmp_path / "journal")
    old = _incarnation(tmp_path, "uid-old", where)
    old.close()  # stopped, its deletion still to come
    # the new incarnation's replica opens first, in the same directory (the opener wipes it)
    directory = tmp_path / "t" / "0"
    shutil.rmtree(directory)
    new = _incarnation(tmp_path, "uid-new", where)
    journal.save_many({"t/0": HardState(term=3, vote="a", commit=0)})
    files_before = sorted(p.name for p in directory.rglob("*"))
    delete_replica(old, journal)
    assert sorted(p.name for p in directory.rglob("*")) == files_before
    assert topic_uid_in(str(directory)) == "uid-new"
    assert journal.load("t/0") == HardState(term=3, vote="a", commit=0)
    new.close()
    journal.close()


def test_deleting_a_replica_of_a_deleted_topic_removes_its_files_and_state(tmp_path: Path) -> None:
    journal = StateJournal(tmp_path / "journal")
    old = _incarnation(tmp_path, "uid-old", "header")
    journal.save_many({"t/0": HardState(term=2, vote="b", commit=0)})
    delete_replica(old, journal)
    assert not (tmp_path / "t" / "0").exists()
    assert "t/0" not in journal.states()
    journal.close()
