"""Opening this node's replicas: queued, in batches on the storage thread, under admission
control, so that thousands of partitions created at once elect and quiesce a few batches at a
time instead of all ticking, heartbeating and campaigning together (which starves every node's
event loop, so leaders lose their quorum and elections never end).

The partition manager (`cluster.node`) decides which replicas this node should hold and queues
them here; a Raft message for a group not hosted yet opens it at once, ahead of the queue (a
leader is adding this node, or this node is behind its peers), in batches as well. In a brand-new group the preferred replica (first in placement
order) campaigns at its first tick and the others wait before their first campaign, so new
groups elect at once and do not split their votes.

What opening a replica's directory does (its incarnation, retirement and rebuild rules), on
the storage thread, is `cluster.replica_dirs`'s, a mixin of `ReplicaOpener`.

Each replica opens on its own: one that cannot (an unreadable or damaged directory, a bug) is
quarantined (`cluster.quarantine`) and never opened again by this process, while the others of
its batch open; an error of the disk itself (`cluster.failstop.DISK_ERRNOS`) stops the node.

Settling time is measured on the injected `clock` (the node's ticker's), not the wall clock.

The opener is split along its threads: this module is the event loop's side (the queue,
admission, hosting, the messages held for groups being opened), `cluster.replica_dirs` the
storage thread's (what each directory holds, and what opening it means).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Mapping
from functools import partial
from typing import cast

from cluster.controller import TopicSpec
from cluster.failstop import NodeFailStopped
from cluster.multiraft import MultiRaft
from cluster.producers import EXPIRATION_MS
from cluster.replica import Replica, same_incarnation
from cluster.replica_dirs import (
    REJOINED,
    RETIRED,
    TOPIC_UID,
    DirectoryOpener,
    OpenFailed,
    delete_replica,
    delete_replicas,
    forget_states_of_deleted_topics,
)
from raft.codec import decode_message
from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import RaftError
from raft.types import AppendRequest, Configuration, Heartbeat, LogPosition, LogReset
from storage import FileHandles, LogConfig, StateJournal

__all__ = [
    "REJOINED",
    "RETIRED",
    "TOPIC_UID",
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
# Replicas queued, opening or settling from which the node counts as busy opening (leader
# balancing waits meanwhile: `cluster.steward`).
BUSY_REPLICAS = 256
# Messages for a group being opened that are kept to deliver once it is (the newest ones; Raft
# resends what is dropped).
HELD_MESSAGES = 8


class ReplicaOpener(DirectoryOpener):
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
        # batches whose opening failed as a whole: their groups are neither queued nor hosted
        # (the partition manager's next comparison with the topics queues them again)
        self.dropped = 0
        # replicas to open, in order, and the ones opened lately that have not settled yet
        # (group -> when opened)
        self.pending: dict[str, tuple[TopicSpec, int, Configuration]] = {}
        self.settling: dict[str, float] = {}
        # settling replicas of groups that elected before (a restart): they asked their peers
        # who leads (`_ask_leader`) and have settled once they know
        self.asked: set[str] = set()
        self._rng = random.Random()
        # groups a message asked for, opened ahead of the queue (`_open_asked_for`, its one
        # task referenced)
        self._asked_for: dict[str, tuple[TopicSpec, int, Configuration, bool]] = {}
        self._opening_tasks: set[asyncio.Task[None]] = set()
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

    def busy(self) -> bool:
        """Is this node opening many replicas (`BUSY_REPLICAS` or more queued, being opened,
        or opened and still settling: a topic of thousands of partitions being created, a
        restart)? A few (a small topic, a replica added) do not count."""
        return len(self.pending) + len(self.opening) + len(self.settling) >= BUSY_REPLICAS

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
                    "list[Replica | OpenFailed | None]",
                    await self.multiraft.run_storage(partial(self._open_batch, batch)),
                )
                now = self.clock()
                topics = self.topics()
                for (spec, _, _), group, result in zip(batch, groups, opened, strict=True):
                    hosted = self._host(group, spec, result, topics)
                    if hosted is not None:
                        settling[group] = now
                        self._ask_leader(hosted)
            except BaseException:
                self.dropped += 1  # the batch is neither queued nor hosted any more
                raise
            finally:
                self.opening.difference_update(groups)
                for group in groups:  # not added (failed, or its topic is gone): nobody to tell
                    self._held.pop(group, None)

    def _add(self, replica: Replica) -> None:
        """Hosts an opened replica and hands it the messages held while it opened. A new
        group's counts as idle from the start: nothing was ever proposed to it, so its leader
        quiesces as soon as every member holds its no-op, where `quiesce_after_ticks` of
        heartbeats first were most of the messages a topic's creation cost."""
        node = replica.node
        if node.term == 0 and node.log.last_index == 0:
            replica.idle_ticks = self.multiraft.quiesce_after_ticks
        self.multiraft.add(replica)
        for sender, payload in self._held.pop(replica.group, ()):
            self.multiraft.deliver(sender, [(replica.group, payload)])
        if _below_vote_floor(node):
            self.rebuilding.add(replica.group)
            self._probe(replica)

    def _ask_leader(self, replica: Replica) -> None:
        """A replica of a group that elected before (this node restarted) asks its peers who
        leads (`RaftNode.probe_membership`, a pre-vote at its own term that changes nothing):
        the group's leader, likely quiesced, tells it at once (asleep, with a quiescing
        heartbeat, when its log is whole: `RaftNode`'s probe answer), where it would otherwise
        hear of it only after its first election timeout (its pre-vote). It has then settled: at a restart with tens of thousands of replicas, the admission's
        window moves on after a round trip instead of after a campaign and a quiescence."""
        node = replica.node
        if node.term == 0 or node.log.last_index == 0 or replica.group in self.rebuilding:
            return  # a new group elects (`open_replica`); a rebuilding replica probes already
        self.asked.add(replica.group)
        self.multiraft.call(node.probe_membership, replica)

    def probe_rebuilding(self) -> None:
        """Each hosted replica whose log is below its vote floor asks the topic's assigned
        replicas (`RaftNode.probe_membership`): below its floor it never campaigns, so a
        quiesced leader would not hear of it otherwise. The partition manager calls this every
        few seconds; a replica leaves the set once its log reaches its floor or it is no longer
        hosted. Knowing its leader is not enough: a leader that heard nothing from it (its
        answers went nowhere while its node, just restarted, had no route to the leader yet)
        quiesces past it as silent, and sends it nothing more."""
        for group in list(self.rebuilding):
            replica = self.multiraft.replicas.get(group)
            if replica is None or not _below_vote_floor(replica.node):
                self.rebuilding.discard(group)
            else:
                self._probe(replica)

    def _probe(self, replica: Replica) -> None:
        spec = self.topics().get(replica.topic)
        if spec is None or replica.partition >= len(spec.assignment):
            return
        members = [m for m in spec.assignment[replica.partition] if m != self.node_id]
        self.multiraft.call(partial(replica.node.probe_membership, members), replica)

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
        self._asked_for[group] = (spec, index, bootstrap, from_leader)
        # a task that has returned may still be in the set until its done callback runs: it
        # will not look at `_asked_for` again, so it does not count (a group asked for in that
        # moment waited in `opening` for ever, its leader's messages held: a re-added learner
        # never caught up)
        if all(task.done() for task in self._opening_tasks):
            task = asyncio.get_running_loop().create_task(self._open_asked_for())
            self._opening_tasks.add(task)
            task.add_done_callback(self._opening_tasks.discard)

    async def _open_asked_for(self) -> None:
        """Opens the groups messages asked for, ahead of the queue, `OPEN_BATCH_REPLICAS` per
        storage-thread call (`_open_batch`: one fsync per directory made, any `TOPIC_UID` files
        written in parallel), those asked for meanwhile in the next. Opened one by one, each
        with its serial fsyncs, they held the storage thread for seconds on a node that had
        fallen behind (its peers opened and led most of its groups first, so their messages
        asked for thousands): its rounds' disk work, and so its answers, waited behind them,
        and its groups' leaders could not quiesce (20,000 partitions on 5 nodes: one node
        settled a fifth of its replicas, the others' leaders of its groups timed out)."""
        while self._asked_for:
            groups = list(itertools.islice(self._asked_for, OPEN_BATCH_REPLICAS))
            asked = [self._asked_for.pop(group) for group in groups]
            try:
                opened = cast(
                    "list[Replica | OpenFailed | None]",
                    await self.multiraft.run_storage(
                        partial(
                            self._open_batch,
                            [(spec, index, bootstrap) for spec, index, bootstrap, _ in asked],
                            [from_leader for *_, from_leader in asked],
                        )
                    ),
                )
            except Exception as error:
                self.dropped += 1
                for group in groups:  # nothing hosted: nobody to hand their messages to
                    self._held.pop(group, None)
                if isinstance(error, NodeFailStopped):
                    return  # the process is exiting
                log.exception("opening replicas %s failed", ", ".join(groups))
                continue
            finally:
                self.opening.difference_update(groups)
            topics = self.topics()
            for group, (spec, *_), replica in zip(groups, asked, opened, strict=True):
                self._host(group, spec, replica, topics, asked_for=True)

    def _host(
        self,
        group: str,
        spec: TopicSpec,
        result: Replica | OpenFailed | None,
        topics: Mapping[str, TopicSpec],
        *,
        asked_for: bool = False,
    ) -> Replica | None:
        """An opened replica quarantined (its opening failed), retired (None: retired here), or
        hosted (returned) unless its topic went or the group is hosted already; the messages
        held for it are handed to it, or dropped. `asked_for`: a peer's message asked for it
        (a leader adding this node back: no longer retired here)."""
        if isinstance(result, OpenFailed):
            self.multiraft.quarantine.add(group, "opening", result.error, spec.uid)
        elif result is None:
            self.retired[group] = spec.uid
        elif spec.name in topics and group not in self.multiraft.replicas:
            if asked_for:
                self.retired.pop(group, None)
            self._add(result)
            return result
        self._held.pop(group, None)
        return None


def _below_vote_floor(node: RaftNode) -> bool:
    """Does the replica's log end below its vote floor (rebuilt, or added back after its log
    was deleted)? It never campaigns then: only its leader brings it up."""
    return node.vote_floor != LogPosition(node.log.last_term, node.log.last_index)
