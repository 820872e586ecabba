"""Opening a replica's directory, on the storage thread: what it holds and what that means for
the replica (`DirectoryOpener`, a mixin of `cluster.opener.ReplicaOpener`, which queues and admits
replicas on the event loop), and the deletion of a replica's files.

A replica directory records the uid of its topic's incarnation: its log's header carries it
(`SegmentedLog`'s tag, durable with the log's first flush), and a `TOPIC_UID` file holds it where
the log does not (a retired replica's, whose log is deleted; a log made before headers carried
tags). One found with another uid belongs to a topic deleted and re-created under the same name:
it is wiped (log, markers, and its hard state in the journal) before the new incarnation's
replica opens, so the
deleted topic's records can never come back in the new one (Kafka's topic IDs, KIP-516). A
running node learns of the new incarnation a moment after its peers; meanwhile their Raft
messages must not reach its old replica, so they name the group with a tag of the topic uid
(`Replica.wire_group`, `t/0@<16 hex digits>`), and a message whose tag is not the hosted
replica's (or, for a group not hosted, the topic's this node knows) is dropped.

Retirement (replica GC): a replica told by its group that a committed configuration left it out
(`raft.types.Removed`) deletes its log and leaves a `RETIRED` marker in its directory; the Raft
term and vote it held stay in the node's state journal, and the marker holds the replica's vote
floor (`RaftNode.vote_floor`: the end of the log it deletes, as "<term> <index>"). A retired
replica is not opened again by the partition manager or by a campaigning peer, only by a message
from a leader (one adding this node back): it then starts with an empty log, an empty
configuration (never the topic's initial assignment), and the term, vote and vote floor it kept
(so it never votes for a log less up to date than the one it deleted: issue 21), and its
directory is marked `REJOINED` (which keeps the floor from then on).

Rebuild: a replica whose log recovery finds damaged (`storage.DamagedLog`) is moved aside and
opened with an empty log and a vote floor (`cluster.rebuild`), unless its topic has a single
replica (no peer to rebuild it from: it is quarantined, its files left as they are); its group's leader sends it the
log again, and until it hears from a leader it asks the topic's assigned replicas
(`probe_rebuilding`), to wake a quiesced one.

A batch lists each topic's directory once: a replica whose directory is not there is new (no
listing of its own), and its directory is made here and its name made durable in its parent
(one fsync of the topic's directory per batch) before the replica is hosted. Each replica opens
on its own: one that cannot returns `OpenFailed` (it is quarantined), unless the disk itself
failed (raised: the node stops).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from cluster.controller import TopicSpec
from cluster.failstop import disk_failure
from cluster.producers import EXPIRATION_MS
from cluster.rebuild import REBUILT, rebuilt_floor, set_aside
from cluster.replica import Replica
from raft.config import RaftConfig
from raft.types import Configuration, LogPosition
from storage import DamagedLog, FileHandles, ForeignLog, LogConfig, StateJournal, StorageError
from storage.atomic import fsync_directory, write_atomic
from storage.meta import read_header
from storage.timer_index import INDEX_DIRECTORY

__all__ = [
    "REJOINED",
    "RETIRED",
    "TOPIC_UID",
    "DirectoryOpener",
    "OpenFailed",
    "delete_replica",
    "delete_replicas",
    "forget_states_of_deleted_topics",
    "topic_uid_in",
]

log = logging.getLogger("flotilla.opener")

# Election timeouts a new group's non-preferred replicas wait, on top of their own, before
# their first campaign (see `open_replica`).
FIRST_CAMPAIGN_DEFER_ELECTIONS = 2
# Markers in a replica's directory (see the module docstring).
RETIRED = "RETIRED"
REJOINED = "REJOINED"
# The uid of the topic incarnation a replica's directory belongs to: a topic deleted and created
# again under the same name while this node was away must not get the old one's log.
TOPIC_UID = "TOPIC_UID"


class DirectoryOpener:
    """The storage thread's side of `ReplicaOpener` (which sets these fields)."""

    node_id: str
    partitions_dir: str
    journal: StateJournal
    raft_config: RaftConfig
    log_config: LogConfig
    handles: FileHandles
    producer_expiration_ms: int = EXPIRATION_MS
    _rng: random.Random
    on_rebuilt: Callable[[str], None]
    cleanly_closed: set[str]

    def replica_dir(self, topic: str, index: int) -> str:
        return os.path.join(self.partitions_dir, topic, str(index))

    def dirs_on_disk(self, topics: list[str]) -> dict[str, set[str]]:
        """Thread: the partition directories each topic has here (one listing per topic)."""
        found: dict[str, set[str]] = {}
        for topic in topics:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                found[topic] = set(os.listdir(os.path.join(self.partitions_dir, topic)))
        return found

    def _open_batch(
        self,
        batch: list[tuple[TopicSpec, int, Configuration]],
        from_leader: list[bool] | None = None,
    ) -> list[Replica | OpenFailed | None]:
        """Storage thread: each replica opens on its own (`_open_one`; `from_leader`, one per
        replica if given: asked for by a leader's message); the `TOPIC_UID` files that some
        need (those whose log's header has no tag) are then written together, their fsyncs in
        parallel, before any is returned."""
        results: list[Replica | OpenFailed | None] = []
        uids: list[tuple[int, str, str]] = []  # (position, path, uid) still to write
        # one listing per topic, not one per replica: most of a new topic's have no directory
        listed = self.dirs_on_disk(sorted({spec.name for spec, _, _ in batch}))
        # the directories in which new replica directories were made (and the partitions
        # directory, for a new topic's): one fsync each makes them durable, for the batch
        syncs: set[str] = set()
        for position, item in enumerate(batch):
            deferred: list[str] = []
            absent = str(item[1]) not in listed.get(item[0].name, ())
            if item[0].name not in listed:
                syncs.add(self.partitions_dir)
            result = self._open_one(
                *item,
                from_leader=from_leader[position] if from_leader is not None else False,
                deferred_uids=deferred,
                names=set() if absent else None,
                deferred_syncs=syncs,
            )
            if isinstance(result, Replica) and deferred:
                uids.append((position, deferred[0], item[0].uid))
            results.append(result)
        # one task per writer thread, each writing its share in turn: as many fsyncs in
        # parallel as one task per file gave, without a future per replica
        pool = _uid_pool()
        shares = [uids[first::UID_WRITE_THREADS] for first in range(UID_WRITE_THREADS)]
        writes = [pool.submit(_write_uids, share) for share in shares if share]
        synced = [pool.submit(fsync_directory, directory) for directory in sorted(syncs)]
        concurrent.futures.wait(writes)
        concurrent.futures.wait(synced)
        for sync in synced:
            sync.result()  # a failed directory fsync: the disk failed, the node stops
        failed: list[tuple[int, BaseException]] = []
        for write in writes:
            failed.extend(write.result())
        for position, error in sorted(failed, key=lambda failure: failure[0]):
            if not isinstance(error, Exception) or disk_failure(error) is not None:
                raise error
            opened = results[position]
            assert isinstance(opened, Replica)
            opened.close()
            results[position] = OpenFailed(error)
        return results

    def _open_one(
        self,
        spec: TopicSpec,
        index: int,
        bootstrap: Configuration,
        *,
        from_leader: bool = False,
        deferred_uids: list[str] | None = None,
        names: set[str] | None = None,
        deferred_syncs: set[str] | None = None,
    ) -> Replica | OpenFailed | None:
        """Storage thread: `open_replica`, its error returned (to quarantine the replica)
        unless the disk itself failed (raised: the node stops)."""
        try:
            return self.open_replica(
                spec,
                index,
                bootstrap,
                from_leader=from_leader,
                deferred_uids=deferred_uids,
                names=names,
                deferred_syncs=deferred_syncs,
            )
        except Exception as error:
            if disk_failure(error) is not None:
                raise
            return OpenFailed(error)

    def open_replica(
        self,
        spec: TopicSpec,
        index: int,
        bootstrap: Configuration,
        *,
        from_leader: bool = False,
        deferred_uids: list[str] | None = None,
        names: set[str] | None = None,
        deferred_syncs: set[str] | None = None,
    ) -> Replica | None:
        """Storage thread. None: the replica retired here and `from_leader` is False (only a
        leader adding this node back re-opens it). `deferred_uids`: the path of a `TOPIC_UID`
        file to write (for a log whose header has no tag) is appended there instead of written
        (the caller writes it, durably, before the replica is hosted). `names`: what the replica's directory holds, if the
        caller knows (an empty set: it has no directory, as it listed the topic's). A new replica's
        directory is made here and made durable in its parent (and a new topic's directory in
        the partitions directory) before the replica is returned, or, with `deferred_syncs`,
        the directories to fsync for that are added there (the caller fsyncs each once)."""
        directory = self.replica_dir(spec.name, index)
        group = f"{spec.name}/{index}"
        uid_path = os.path.join(directory, TOPIC_UID)
        # one listing instead of a failed open or stat per marker: a new replica (thousands at
        # a topic's creation) has no directory yet
        if names is None:
            names = _names_in(directory)
        if spec.uid and TOPIC_UID in names:
            found = _read_text(uid_path)
            if found is not None and found != spec.uid:
                log.warning(
                    "wiping %s: it belongs to an earlier topic %r (uid %s, now %s)",
                    directory, spec.name, found, spec.uid,
                )  # fmt: skip
                shutil.rmtree(directory, ignore_errors=True)
                self.journal.forget([group])
                names = set()
        if RETIRED in names:
            # finish a retirement a crash interrupted (the marker is written first)
            shutil.rmtree(os.path.join(directory, "log"), ignore_errors=True)
            shutil.rmtree(os.path.join(directory, INDEX_DIRECTORY), ignore_errors=True)
            if not from_leader:
                return None
            floor = _read_vote_floor(os.path.join(directory, RETIRED))
            write_atomic(os.path.join(directory, REJOINED), _vote_floor_text(floor))
            os.unlink(os.path.join(directory, RETIRED))
            fsync_directory(directory)
            bootstrap = Configuration()
        elif REJOINED in names:
            floor = _read_vote_floor(os.path.join(directory, REJOINED))
            bootstrap = Configuration()
        else:
            floor = LogPosition()
        if REBUILT in names:
            floor = max(floor, rebuilt_floor(directory))
        if not names:  # no directory yet (or wiped): made here, its name durable before use
            parent = os.path.dirname(directory)
            if deferred_syncs is None:
                os.makedirs(directory, exist_ok=True)
                fsync_directory(parent)
                fsync_directory(os.path.dirname(parent))
            else:
                os.makedirs(directory, exist_ok=True)
                deferred_syncs.add(parent)
        hard_state = self.journal.load(group)
        durable = group in self.cleanly_closed
        self.cleanly_closed.discard(group)  # written by this process from now on

        def open_it() -> Replica:
            return Replica.open(
                tag=spec.uid or None,
                node_id=self.node_id,
                topic=spec.name,
                partition=index,
                directory=directory,
                bootstrap=bootstrap,
                hard_state=hard_state,
                raft_config=self.raft_config,
                log_config=self.log_config,
                handles=self.handles,
                rng=self._rng,  # one per node: seeding one per replica cost more than the rest
                producer_expiration_ms=self.producer_expiration_ms,
                durable=durable,
                names=names,
            )

        try:
            replica = open_it()
        except ForeignLog as foreign:
            # its log's header names an earlier incarnation (this one's has no `TOPIC_UID`)
            log.warning("wiping %s: it belongs to an earlier topic %r (uid %s, now %s)",
                        directory, spec.name, foreign.found, spec.uid)  # fmt: skip
            shutil.rmtree(directory, ignore_errors=True)
            self.journal.forget([group])
            return self.open_replica(
                spec,
                index,
                bootstrap,
                from_leader=from_leader,
                deferred_uids=deferred_uids,
                names=set(),
                deferred_syncs=deferred_syncs,
            )
        except DamagedLog as damage:
            if spec.replication_factor < 2:
                raise  # no peer to rebuild it from: quarantined, its files left as they are
            floor = set_aside(directory, group, damage, hard_state, floor, self.handles)
            self.on_rebuilt(group)
            replica = open_it()
        replica.node.restore_vote_floor(floor)
        replica.set_topic_uid(spec.uid)
        if spec.uid and TOPIC_UID not in names and replica.segmented.header_tag != spec.uid:
            if deferred_uids is None:
                write_atomic(uid_path, spec.uid.encode())
            else:
                deferred_uids.append(uid_path)
        assigned = spec.assignment[index] if index < len(spec.assignment) else ()
        if (
            hard_state.term == 0
            and replica.segmented.last_index == 0
            and assigned
            and bootstrap.voters
        ):
            if assigned[0] == self.node_id:
                # A new group's preferred replica (first in placement order) campaigns at its
                # first tick: waiting out a whole election timeout first only kept every new
                # group's replicas ticking, unled. Timing only.
                replica.node.hasten_campaign()
            else:
                # the others let it campaign first, so that thousands of new groups do not
                # split their votes. Timing only.
                replica.node.defer_campaign(
                    FIRST_CAMPAIGN_DEFER_ELECTIONS * self.raft_config.election_ticks
                )
        return replica

    def retire(self, replica: Replica) -> None:
        """Storage thread: the replica was removed from its group (`RaftNode.removed_at`) and
        is no longer hosted. Its log (and a timer log's index) is deleted; the marker goes first, durably, so a crash
        part-way is finished on the next open. Its term and vote stay in the journal, its vote
        floor in the marker."""
        floor = replica.node.vote_floor
        replica.close()
        uid_path = os.path.join(replica.directory, TOPIC_UID)
        if replica.topic_uid and not os.path.exists(uid_path):
            write_atomic(uid_path, replica.topic_uid.encode())  # its log's header goes below
        write_atomic(os.path.join(replica.directory, RETIRED), _vote_floor_text(floor))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(replica.directory, REJOINED))
        shutil.rmtree(os.path.join(replica.directory, "log"), ignore_errors=True)
        # a timer log's index, derived from the log, goes with it (rebuilt if it ever rejoins)
        shutil.rmtree(os.path.join(replica.directory, INDEX_DIRECTORY), ignore_errors=True)
        fsync_directory(replica.directory)


@dataclass(frozen=True, slots=True)
class OpenFailed:
    """A replica that could not be opened, and why (it is quarantined)."""

    error: Exception


def delete_replicas(replicas: list[Replica], journal: StateJournal) -> None:
    """Storage thread: `delete_replica` for each, in one job (queued before anything else
    can open their groups again)."""
    for replica in replicas:
        delete_replica(replica, journal)


def delete_replica(replica: Replica, journal: StateJournal) -> None:
    """Storage thread: a replica of a deleted topic (or of an earlier incarnation of it), no
    longer hosted: its files and its hard state go, unless its directory belongs to another
    incarnation by now (the topic's next one opened there first: its uid is there, and the
    group's hard state in the journal is that replica's)."""
    replica.close()
    if replica.topic_uid:
        found = topic_uid_in(replica.directory)
        if found is not None and found != replica.topic_uid:
            log.info("%s of topic uid %s: its directory is the newer incarnation %s's now, kept",
                     replica.group, replica.topic_uid, found)  # fmt: skip
            return
    shutil.rmtree(replica.directory, ignore_errors=True)
    journal.forget([replica.group])


def topic_uid_in(directory: str) -> str | None:
    """The uid of the topic incarnation the replica directory belongs to: its `TOPIC_UID`
    file's, else its log header's tag; None if neither says (or the header does not read)."""
    found = _read_text(os.path.join(directory, TOPIC_UID))
    if found is not None:
        return found
    try:
        header = read_header(os.path.join(directory, "log"))
    except (StorageError, OSError):
        return None
    return None if header is None else header.tag


def forget_states_of_deleted_topics(
    journal: StateJournal, topics: set[str], hosted: set[str]
) -> None:
    """Storage thread: drops the journal's hard states of groups whose topic is gone (those
    kept for retired replicas, chiefly)."""
    stale = [g for g in journal.states() if g.rpartition("/")[0] not in topics and g not in hosted]
    if stale:
        journal.forget(stale)


def _vote_floor_text(floor: LogPosition) -> bytes:
    return f"{floor.term} {floor.index}\n".encode()


def _read_vote_floor(path: str) -> LogPosition:
    """The vote floor a retirement marker holds; (0, 0) for a marker written before markers
    held one (empty)."""
    text = (_read_text(path) or "").strip()
    if not text:
        return LogPosition()
    parts = text.split()
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise ValueError(f"{path} holds {text!r}; a vote floor is '<term> <index>' or nothing")
    return LogPosition(int(parts[0]), int(parts[1]))


_uid_writers: concurrent.futures.ThreadPoolExecutor | None = None


UID_WRITE_THREADS = 8  # concurrent fsyncs share the file system's journal commits


def _uid_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that write a batch's `TOPIC_UID` files (made on first use, from the storage
    thread only)."""
    global _uid_writers
    if _uid_writers is None:
        _uid_writers = concurrent.futures.ThreadPoolExecutor(UID_WRITE_THREADS, "flotilla-uid")
    return _uid_writers


def _write_uids(uids: list[tuple[int, str, str]]) -> list[tuple[int, BaseException]]:
    """A writer thread: each (position, path, uid) written durably, in turn; the positions
    whose write failed, with the error (the others are written all the same)."""
    failed: list[tuple[int, BaseException]] = []
    for position, path, uid in uids:
        try:
            write_atomic(path, uid.encode())
        except BaseException as error:
            failed.append((position, error))
    return failed


def _names_in(directory: str) -> set[str]:
    """The names in `directory`; none if it does not exist."""
    try:
        return set(os.listdir(directory))
    except FileNotFoundError:
        return set()


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        return None
