"""Opening this node's replicas: queued, in batches on the storage thread, under admission
control, so that thousands of partitions created at once elect and quiesce a few batches at a
time instead of all ticking, heartbeating and campaigning together (which starves every node's
event loop, so leaders lose their quorum and elections never end).

The partition manager (`cluster.node`) decides which replicas this node should hold and queues
them here; a Raft message for a group not hosted yet opens it at once, ahead of the queue (a
leader is adding this node). In a brand-new group the preferred replica (first in placement
order) campaigns at its first tick and the others wait before their first campaign, so new
groups elect at once and do not split their votes.

A replica directory records the uid of its topic's incarnation (`TOPIC_UID`). One found with
another uid belongs to a topic deleted and re-created under the same name: it is wiped (log,
markers, and its hard state in the journal) before the new incarnation's replica opens, so the
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

Each replica opens on its own: one that cannot (an unreadable or damaged directory, a bug) is
quarantined (`cluster.quarantine`) and never opened again by this process, while the others of
its batch open; an error of the disk itself (`cluster.failstop.DISK_ERRNOS`) stops the node.

Settling time is measured on the injected `clock` (the node's ticker's), not the wall clock.

Why one module of ~550 lines: admission, the incarnation check and retirement are three rules
about one act, opening a replica directory, and each needs the others' state at that moment.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import random
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import cast

from cluster.controller import TopicSpec
from cluster.failstop import NodeFailStopped, disk_failure
from cluster.multiraft import MultiRaft
from cluster.producers import EXPIRATION_MS
from cluster.rebuild import REBUILT, rebuilt_floor, set_aside
from cluster.replica import Replica, same_incarnation
from raft.codec import decode_message
from raft.config import RaftConfig
from raft.errors import RaftError
from raft.types import AppendRequest, Configuration, Heartbeat, LogPosition, LogReset
from storage import DamagedLog, FileHandles, LogConfig, StateJournal
from storage.atomic import fsync_directory, write_atomic
from storage.timer_index import INDEX_DIRECTORY

__all__ = [
    "ReplicaOpener",
    "delete_replica",
    "delete_replicas",
    "forget_states_of_deleted_topics",
]

log = logging.getLogger("flotilla.opener")

# Replicas opened per storage-thread call (the driver's writes interleave with the opening of
# thousands of replicas), and how many lately opened ones may be settling (electing, not yet
# quiesced) before the next batch opens; one counts for at most SETTLING_MAX_S.
OPEN_BATCH_REPLICAS = 250
SETTLING_LIMIT = 1000
SETTLING_MAX_S = 10.0
# Election timeouts a new group's non-preferred replicas wait, on top of their own, before
# their first campaign (see `open_replica`).
FIRST_CAMPAIGN_DEFER_ELECTIONS = 2
# Messages for a group being opened that are kept to deliver once it is (the newest ones; Raft
# resends what is dropped).
HELD_MESSAGES = 8
# Markers in a replica's directory (see the module docstring).
RETIRED = "RETIRED"
REJOINED = "REJOINED"
# The uid of the topic incarnation a replica's directory belongs to: a topic deleted and created
# again under the same name while this node was away must not get the old one's log.
TOPIC_UID = "TOPIC_UID"


class ReplicaOpener:
    def __init__(
        self,
        *,
        node_id: str,
        partitions_dir: str,
        journal: StateJournal,
        raft_config: RaftConfig,
        log_config: LogConfig,
        handles: FileHandles,
        multiraft: MultiRaft,
        topics: Callable[[], Mapping[str, TopicSpec]],
        producer_expiration_ms: int = EXPIRATION_MS,
        clock: Callable[[], float],
    ) -> None:
        self.clock = clock  # seconds now: the node's ticker's `now` (`cluster.clock`)
        self.node_id = node_id
        self.producer_expiration_ms = producer_expiration_ms
        self.partitions_dir = partitions_dir
        self.journal = journal
        self.raft_config = raft_config
        self.log_config = log_config
        self.handles = handles
        self.multiraft = multiraft
        self.topics = topics
        self.opening: set[str] = set()  # being opened on the storage thread right now
        # replicas to open, in order, and the ones opened lately that have not settled yet
        # (group -> when opened)
        self.pending: dict[str, tuple[TopicSpec, int, Configuration]] = {}
        self.settling: dict[str, float] = {}
        # settling replicas of groups that elected before (a restart): they asked their peers
        # who leads (`_ask_leader`) and have settled once they know
        self.asked: set[str] = set()
        self._rng = random.Random()
        self._opening_tasks: set[asyncio.Task[None]] = set()  # `open_on_message`'s, referenced
        # messages for groups being opened, delivered once they are (the newest few)
        self._held: dict[str, list[tuple[str, bytes]]] = {}
        # groups whose replica here retired, with their topic's uid (as far as this process
        # has seen: a restart learns them again from the markers, in `open_replica`)
        self.retired: dict[str, str] = {}
        # told (on the storage thread) of each replica rebuilt after its log was found damaged
        self.on_rebuilt: Callable[[str], None] = lambda group: None
        # hosted replicas whose log is below their vote floor (rebuilt, or added back after
        # retiring), until they hear from a leader (`probe_rebuilding`)
        self.rebuilding: set[str] = set()
        # groups the last process closed cleanly (`cluster.node`'s clean-shutdown marker):
        # their first open here trusts their files as durable (`Replica.open`'s `durable`)
        self.cleanly_closed: set[str] = set()

    def knows(self, group: str) -> bool:
        """Is the group hosted, being opened, queued, retired or quarantined here?"""
        return (
            group in self.multiraft.replicas
            or group in self.opening
            or group in self.pending
            or group in self.retired
            or group in self.multiraft.quarantine
        )

    def queue(self, spec: TopicSpec, index: int, bootstrap: Configuration) -> None:
        self.pending[f"{spec.name}/{index}"] = (spec, index, bootstrap)

    def forget_deleted(self) -> None:
        """Drops queued and retired replicas of topics that no longer exist."""
        topics = self.topics()
        for group in [g for g, (spec, _, _) in self.pending.items() if spec.name not in topics]:
            del self.pending[group]
        self.retired = {
            group: uid
            for group, uid in self.retired.items()
            if (spec := topics.get(group.rpartition("/")[0])) is not None and spec.uid == uid
        }
        self.multiraft.quarantine.forget_if(
            lambda entry: (
                (spec := topics.get(entry.group.rpartition("/")[0])) is None
                or bool(spec.uid and entry.topic_uid and spec.uid != entry.topic_uid)
            )
        )

    def replica_dir(self, topic: str, index: int) -> str:
        return os.path.join(self.partitions_dir, topic, str(index))

    def dirs_on_disk(self, topics: list[str]) -> dict[str, set[str]]:
        """Thread: the partition directories each topic has here (one listing per topic)."""
        found: dict[str, set[str]] = {}
        for topic in topics:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                found[topic] = set(os.listdir(os.path.join(self.partitions_dir, topic)))
        return found

    async def open_pending(self) -> None:
        """Opens queued replicas on the storage thread, `OPEN_BATCH_REPLICAS` per call, while
        fewer than `SETTLING_LIMIT` replicas opened lately are still settling (not yet
        quiesced, for at most `SETTLING_MAX_S`)."""
        now = self.clock()
        replicas, settling, asked = self.multiraft.replicas, self.settling, self.asked
        for group, opened_at in list(settling.items()):
            replica = replicas.get(group)
            if (
                replica is None
                or replica.node.quiesced
                or now - opened_at > SETTLING_MAX_S
                or (group in asked and replica.node.leader_id is not None)
            ):
                del settling[group]
                asked.discard(group)
        while self.pending and len(settling) < SETTLING_LIMIT:
            groups = list(itertools.islice(self.pending, OPEN_BATCH_REPLICAS))
            batch = [self.pending.pop(group) for group in groups]
            self.opening.update(groups)
            try:
                opened = cast(
                    "list[Replica | _OpenFailed | None]",
                    await self.multiraft.run_storage(partial(self._open_batch, batch)),
                )
                now = self.clock()
                topics = self.topics()
                for (spec, _, _), group, result in zip(batch, groups, opened, strict=True):
                    if isinstance(result, _OpenFailed):
                        self.multiraft.quarantine.add(group, "opening", result.error, spec.uid)
                    elif result is None:
                        self.retired[group] = spec.uid
                    elif result.topic in topics and result.group not in replicas:
                        self._add(result)
                        settling[result.group] = now
                        self._ask_leader(result)
            finally:
                self.opening.difference_update(groups)
                for group in groups:  # not added (failed, or its topic is gone): nobody to tell
                    self._held.pop(group, None)

    def _add(self, replica: Replica) -> None:
        """Hosts an opened replica and hands it the messages held while it opened."""
        self.multiraft.add(replica)
        for sender, payload in self._held.pop(replica.group, ()):
            self.multiraft.deliver(sender, [(replica.group, payload)])
        node = replica.node
        if node.vote_floor != LogPosition(node.log.last_term, node.log.last_index):
            self.rebuilding.add(replica.group)
            self._probe(replica)

    def _ask_leader(self, replica: Replica) -> None:
        """A replica of a group that elected before (this node restarted) asks its peers who
        leads (`RaftNode.probe_membership`, a pre-vote at its own term that changes nothing):
        the group's leader, likely quiesced, wakes and sends it a heartbeat at once, where it
        would otherwise hear of it only after its first election timeout (its pre-vote). It
        has then settled: at a restart with tens of thousands of replicas, the admission's
        window moves on after a round trip instead of after a campaign and a quiescence."""
        node = replica.node
        if node.term == 0 or node.log.last_index == 0 or replica.group in self.rebuilding:
            return  # a new group elects (`open_replica`); a rebuilding replica probes already
        self.asked.add(replica.group)
        self.multiraft.call(node.probe_membership, replica)

    def probe_rebuilding(self) -> None:
        """Each hosted replica whose log is below its vote floor and that knows no leader asks
        the topic's assigned replicas (`RaftNode.probe_membership`): below its floor it never
        campaigns, so a quiesced leader would not hear of it otherwise. The partition
        manager calls this every few seconds; a replica leaves the set once it hears from a
        leader (which then sends it what it lacks) or is no longer hosted."""
        for group in list(self.rebuilding):
            replica = self.multiraft.replicas.get(group)
            if replica is None or replica.node.leader_id is not None:
                self.rebuilding.discard(group)
            else:
                self._probe(replica)

    def _probe(self, replica: Replica) -> None:
        spec = self.topics().get(replica.topic)
        if spec is None or replica.partition >= len(spec.assignment):
            return
        members = [m for m in spec.assignment[replica.partition] if m != self.node_id]
        self.multiraft.call(partial(replica.node.probe_membership, members), replica)

    def _open_batch(
        self, batch: list[tuple[TopicSpec, int, Configuration]]
    ) -> list[Replica | _OpenFailed | None]:
        """Storage thread: each replica opens on its own (`_open_one`); the `TOPIC_UID` files
        the new ones need are then written together, their fsyncs in parallel (two each,
        serial, were most of the time a new replica took to open), before any is returned."""
        results: list[Replica | _OpenFailed | None] = []
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
            results[position] = _OpenFailed(error)
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
    ) -> Replica | _OpenFailed | None:
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
            return _OpenFailed(error)

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
        file to write is appended there instead of written (the caller writes it, durably,
        before the replica is hosted). `names`: what the replica's directory holds, if the
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
        except DamagedLog as damage:
            if spec.replication_factor < 2:
                raise  # no peer to rebuild it from: quarantined, its files left as they are
            floor = set_aside(directory, group, damage, hard_state, floor, self.handles)
            self.on_rebuilt(group)
            replica = open_it()
        replica.node.restore_vote_floor(floor)
        replica.set_topic_uid(spec.uid)
        if spec.uid and TOPIC_UID not in names:
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

    def open_on_message(
        self, group: str, tag: str, sender: str, payload: bytes | memoryview
    ) -> None:
        """A Raft message for a partition not hosted here: a leader is adding this node, or a
        replica of a new group campaigns before this one opened. The replica opens on the
        storage thread at once, ahead of the queue (its directory may hold a long log from an
        earlier membership: opening must not block the event loop); the message (with the
        newest few that follow it while the replica opens) is delivered once it is open."""
        topic, _, index_text = group.rpartition("/")
        spec = self.topics().get(topic)
        if spec is None or not index_text.isdigit() or int(index_text) >= spec.partitions:
            return
        if not same_incarnation(tag, spec.uid):
            return  # from another incarnation of the topic than the one this node knows
        try:
            from_leader = isinstance(decode_message(payload), AppendRequest | Heartbeat | LogReset)
        except RaftError:
            return  # malformed: the host counts it when the group is hosted; nothing to open
        if self.retired.get(group) == spec.uid and not from_leader:
            return  # a campaign of a peer that was removed too (it hears so from the members)
        if group in self.multiraft.quarantine:
            return  # stopped on an error of its own: not opened again by this process
        if group in self.opening:
            held = self._held.setdefault(group, [])
            held.append((sender, bytes(payload)))
            del held[:-HELD_MESSAGES]
            return
        index = int(index_text)
        assigned = spec.assignment[index] if index < len(spec.assignment) else ()
        bootstrap = (
            Configuration(voters=frozenset(assigned))
            if self.node_id in assigned
            else Configuration()
        )
        queued = self.pending.pop(group, None)
        if queued is not None:
            bootstrap = queued[2]
        self.opening.add(group)
        self._held[group] = [(sender, bytes(payload))]
        opening = self._open_now(group, spec, index, bootstrap, from_leader)
        task = asyncio.get_running_loop().create_task(opening)
        self._opening_tasks.add(task)
        task.add_done_callback(self._opening_tasks.discard)

    async def _open_now(
        self, group: str, spec: TopicSpec, index: int, bootstrap: Configuration, from_leader: bool
    ) -> None:
        try:
            replica = await self.multiraft.run_storage(
                partial(self._open_one, spec, index, bootstrap, from_leader=from_leader)
            )
        except NodeFailStopped:
            self._held.pop(group, None)
            return  # the process is exiting
        except Exception:
            log.exception("opening replica %s failed", group)
            self._held.pop(group, None)
            return
        finally:
            self.opening.discard(group)
        if isinstance(replica, _OpenFailed):
            self.multiraft.quarantine.add(group, "opening", replica.error, spec.uid)
            self._held.pop(group, None)
        elif replica is None:
            self.retired[group] = spec.uid
            self._held.pop(group, None)
        elif spec.name in self.topics() and group not in self.multiraft.replicas:
            self.retired.pop(group, None)
            self._add(replica)  # type: ignore[arg-type]
        else:
            self._held.pop(group, None)

    def retire(self, replica: Replica) -> None:
        """Storage thread: the replica was removed from its group (`RaftNode.removed_at`) and
        is no longer hosted. Its log (and a timer log's index) is deleted; the marker goes first, durably, so a crash
        part-way is finished on the next open. Its term and vote stay in the journal, its vote
        floor in the marker."""
        floor = replica.node.vote_floor
        replica.close()
        write_atomic(os.path.join(replica.directory, RETIRED), _vote_floor_text(floor))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(replica.directory, REJOINED))
        shutil.rmtree(os.path.join(replica.directory, "log"), ignore_errors=True)
        # a timer log's index, derived from the log, goes with it (rebuilt if it ever rejoins)
        shutil.rmtree(os.path.join(replica.directory, INDEX_DIRECTORY), ignore_errors=True)
        fsync_directory(replica.directory)


@dataclass(frozen=True, slots=True)
class _OpenFailed:
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
    incarnation by now (the topic's next one opened there first: its `TOPIC_UID` names it, and
    the group's hard state in the journal is that replica's)."""
    replica.close()
    if replica.topic_uid:
        found = _read_text(os.path.join(replica.directory, TOPIC_UID))
        if found is not None and found != replica.topic_uid:
            log.info("%s of topic uid %s: its directory is the newer incarnation %s's now, kept",
                     replica.group, replica.topic_uid, found)  # fmt: skip
            return
    shutil.rmtree(replica.directory, ignore_errors=True)
    journal.forget([replica.group])


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
