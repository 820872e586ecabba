"""Replica garbage collection: a replica its group removed retires, its log deleted.

A replica retires only once a member says a committed configuration of its group left this
node out (`raft.types.Removed`, seen as `removed_at` after a MultiRaft round): Raft's safety
assumes no voter forgets what it voted and stored, and only such a configuration, newer than the
replica's own, proves it is no voter any more. Its term and vote outlive it in the journal, and
it never rejoins with the initial assignment (`cluster.opener`).

The safety net (`probe_unplaced`): a quiesced follower never campaigns, so if the leader's word
of its removal was lost, nothing else would tell it; those that placement no longer names ask
their group (`probe_membership`), and members answer `Removed` if it was.

Built with only what it uses: the MultiRaft driver, the replica opener (which retires the
files), the group steward (which forgets the group), the topic table and the placement
candidates, and a callback counting retirements.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial

from cluster.controller import TopicSpec
from cluster.failstop import NodeFailStopped
from cluster.logs import event
from cluster.multiraft import MultiRaft
from cluster.opener import ReplicaOpener
from cluster.placement import Candidate, place
from cluster.replica import Replica
from cluster.steward import GroupSteward
from cluster.topic_spec import placement_key
from raft.types import Role

__all__ = ["PROBE_CHUNK", "ReplicaCollector"]

log = logging.getLogger("flotilla.node")

# Replicas `ReplicaCollector.probe_unplaced` looks at between two yields to the event loop.
PROBE_CHUNK = 500


class ReplicaCollector:
    # how often quiesced followers that placement no longer names ask their group whether they
    # were removed (`probe_unplaced`; the partition manager keeps the time)
    probe_interval_s = 60.0

    def __init__(
        self,
        node_id: str,
        multiraft: MultiRaft,
        opener: ReplicaOpener,
        steward: GroupSteward,
        topics: Callable[[], Mapping[str, TopicSpec]],
        placement_candidates: Callable[[], list[Candidate]],
        on_retired: Callable[[], None],
    ) -> None:
        self.node_id = node_id
        self.multiraft = multiraft
        self.opener = opener
        self.steward = steward
        self.topics = topics
        self.placement_candidates = placement_candidates
        self.on_retired = on_retired
        self.retiring: set[str] = set()  # groups whose replica is being retired (`retire`)
        self.tasks: set[asyncio.Task[None]] = set()  # the retirements under way

    def note_removed(self, touched: Iterable[Replica]) -> None:
        """After a MultiRaft round: starts retiring each of `touched` (the groups whose role
        may have changed) that a member said was removed."""
        for replica in touched:
            if replica.node.removed_at and replica.group not in self.retiring:
                self.retiring.add(replica.group)
                task = asyncio.get_running_loop().create_task(self.retire(replica))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def retire(self, replica: Replica) -> None:
        """The replica stops and its log is deleted; its term and vote stay in the journal (see
        `cluster.opener`). Until then it only cost disk space (and, not hearing from a leader,
        a pre-vote every election timeout)."""
        group = replica.group
        try:
            if self.multiraft.replicas.get(group) is not replica:
                return
            if replica.node.removed_at <= replica.node.configuration_index:
                replica.node.removed_at = 0  # a leader added it back meanwhile: it stays
                return
            self.multiraft.remove(group)
            self.steward.forget(group)
            self.opener.retired[group] = replica.topic_uid
            await self.multiraft.run_storage(partial(self.opener.retire, replica))
            self.on_retired()
            event(
                log, "replica_retired", topic=replica.topic, partition=replica.partition,
                configuration_index=replica.node.removed_at,
                reason="a committed configuration left this node out",
            )  # fmt: skip
        except NodeFailStopped:
            raise
        except Exception:
            log.exception("retiring replica %s failed", group)
        finally:
            self.retiring.discard(group)

    async def probe_unplaced(self) -> int:
        """Quiesced followers that placement no longer names ask their group whether they were
        removed. Returns how many were probed."""
        candidates = self.placement_candidates()
        probed = 0
        for n, replica in enumerate(list(self.multiraft.replicas.values())):
            if n % PROBE_CHUNK == PROBE_CHUNK - 1:
                await asyncio.sleep(0)  # ~10 µs of placement each: let the loop breathe
            node = replica.node
            spec = self.topics().get(replica.topic)
            if not node.quiesced or node.role is not Role.FOLLOWER or spec is None:
                continue
            key = placement_key(replica.topic, replica.partition, self.topics())
            if self.node_id not in place(key, candidates, spec.replication_factor):
                self.multiraft.call(node.probe_membership, replica)
                probed += 1
        return probed
