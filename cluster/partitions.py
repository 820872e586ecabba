"""The partition manager: on every tick of its `Ticker` (`interval_s`) the node compares the
topics it knows with its local replicas.

It opens a replica for every partition whose initial assignment names it (with that assignment
as the bootstrap configuration), re-opens replicas found on disk, and deletes the replicas of
deleted topics (`reconcile_local`, every 5 s or when the topics change). A Raft message for a
partition this node does not host yet (a leader adding it as a learner) opens the replica on
the spot (`cluster.opener`). Each pass also refreshes the topic table, applies retention every
`retention_check_s`, lets replica GC probe (`cluster.collector`) and the group steward move
replicas and leaders (`cluster.steward`).

Time: the ticker (`cluster.clock`: the node's `LoopTicker`, or a test's `FakeTicker`) paces
the passes, and its clock decides the intervals above (a pass at tick time `at` reconciles when
`at - local_checked_at > RECONCILE_EVERY_S`, and so on): nothing here reads the wall clock. A
pass waits for the next tick after the last pass ended, so a slow pass is not followed by
another at once.

Built with only what it uses: the node's id and config, the topic admin (the table and its
refresh), the MultiRaft driver, the opener, the steward, the collector, the state journal and
the partitions directory, the placement candidates, and the ticker.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
from collections.abc import Callable, Mapping
from functools import partial

from cluster.clock import Ticker, ticker_or_loop
from cluster.collector import ReplicaCollector
from cluster.config import NodeConfig
from cluster.controller import TopicSpec
from cluster.failstop import NodeFailStopped
from cluster.logs import EventBudget
from cluster.multiraft import MultiRaft
from cluster.opener import ReplicaOpener, delete_replicas, forget_states_of_deleted_topics
from cluster.placement import Candidate
from cluster.replica import Replica
from cluster.retention import apply_retention
from cluster.steward import GroupSteward
from cluster.topics import TopicAdmin
from raft.types import Configuration
from storage import StateJournal

__all__ = ["PartitionManager"]

log = logging.getLogger("flotilla.node")

# the longest between two comparisons of the local replicas with the topics (a change of the
# topics brings the next one forward). The comparison walks every partition of every topic
# (100,000 of them: a tenth of a second), so one that would find the same as the last (the
# topics, the hosted replicas, the retired and quarantined ones all unchanged) is skipped, up to
# RECONCILE_ANYWAY_S
RECONCILE_EVERY_S = 5.0
RECONCILE_ANYWAY_S = 60.0
# partitions compared in one go before the loop runs its other work (`reconcile_local`)
YIELD_EVERY_PARTITIONS = 4096


class PartitionManager:
    interval_s = 0.2  # one pass

    def __init__(
        self,
        config: NodeConfig,
        topic_admin: TopicAdmin,
        multiraft: MultiRaft,
        opener: ReplicaOpener,
        steward: GroupSteward,
        collector: ReplicaCollector,
        elections: EventBudget,
        journal: StateJournal,
        partitions_dir: str,
        placement_candidates: Callable[[], list[Candidate]],
        ticker: Ticker | None = None,
    ) -> None:
        """`ticker` paces the passes (default: a `LoopTicker` of `interval_s`)."""
        self.ticker = ticker_or_loop(ticker, self.interval_s)
        self.config = config
        self.topic_admin = topic_admin
        self.multiraft = multiraft
        self.opener = opener
        self.steward = steward
        self.collector = collector
        self.elections = elections
        self.journal = journal
        self.partitions_dir = partitions_dir
        self.placement_candidates = placement_candidates
        # when local replicas were last compared with the topics (never yet: the first pass does)
        self.local_checked_at = self._fully_checked_at = -math.inf
        self._reconciled_version: object = None  # the topics' version they were compared with
        # what the last comparison saw besides the topics (`_local_state`)
        self._reconciled_local: object = None
        # on the ticker's clock, from its start: when retention was last applied, when unplaced
        # quiesced followers were last probed
        self._retention_checked_at = self._probed_at = 0.0
        self._tick_at: float | None = None  # the latest tick not yet passed
        self._ticked = asyncio.Event()
        self.passes = 0  # passes run (a test waits on it)

    @property
    def topics(self) -> Mapping[str, TopicSpec]:
        return self.topic_admin.topics

    async def run(self) -> None:
        """Passes, one per tick, until cancelled (the ticker stops with it)."""
        self.ticker.start(self._on_tick)
        self._retention_checked_at = self._probed_at = self.ticker.started_at
        try:
            while True:
                await self._ticked.wait()
                at = self._tick_at
                assert at is not None
                await self.run_pass(at)
                self._ticked.clear()  # the ticks that came during the pass: one wait for the next
        finally:
            await self.ticker.stop()

    def _on_tick(self, at: float) -> None:
        self._tick_at = at
        self._ticked.set()

    async def run_pass(self, at: float) -> None:
        """One pass at time `at` on the ticker's clock (a failed pass is logged; the next tick
        brings the next)."""
        try:
            await self.topic_admin.refresh()
            version = self.topic_admin.version
            if version != self._reconciled_version or (
                at - self.local_checked_at > RECONCILE_EVERY_S
                and (
                    self._local_state() != self._reconciled_local
                    or at - self._fully_checked_at > RECONCILE_ANYWAY_S
                )
            ):
                self._reconciled_version = version
                self.local_checked_at = self._fully_checked_at = at
                await self.reconcile_local()
                self._reconciled_local = self._local_state()
            elif at - self.local_checked_at > RECONCILE_EVERY_S:
                self.local_checked_at = at  # nothing changed: the comparison would find nothing
            if at == self.local_checked_at:
                self.opener.probe_rebuilding()
            if at - self._retention_checked_at > self.config.retention_check_s:
                self._retention_checked_at = at
                await apply_retention(self.multiraft, self.topics)
            if at - self._probed_at > self.collector.probe_interval_s:
                self._probed_at = at
                await self.collector.probe_unplaced()
            await self.opener.open_pending()
            self.elections.tick()
            self.steward.change_log.tick()
            self.steward.reconcile(
                self.placement_candidates(), self.topics, self.topic_admin.version
            )
        except (asyncio.CancelledError, NodeFailStopped):
            raise  # fail-stop: the process is exiting (`cluster.failstop`)
        except Exception:
            log.exception("partition manager round failed")
        finally:
            self.passes += 1

    async def reconcile_local(self) -> None:
        """Queues for opening every replica the topics assign here or that is on disk, and
        drops the replicas of deleted topics. O(partitions), so it runs every 5 s or when the
        topics change, not every pass, and lets the loop run every `YIELD_EVERY_PARTITIONS`
        partitions (100,000 of them held it for a few hundred milliseconds)."""
        # Replicas of deleted topics (or of an earlier incarnation of a topic deleted and
        # created again) stop first, before anything here awaits; their files go next. A
        # replica removed from its group is retired when a member tells it so (`cluster.collector`):
        # only then, because Raft's safety assumes no voter forgets what it voted and stored,
        # and only a committed configuration that leaves it out, newer than its own, proves it
        # is no voter any more. Its term and vote outlive it in the journal, and it never
        # rejoins with the initial assignment.
        gone = [g for g, r in self.multiraft.replicas.items() if self.deleted(r)]
        stopped = [r for r in map(self.multiraft.remove, gone) if r is not None]
        for group in gone:
            self.steward.forget(group)
        if stopped:
            # one job, queued before this awaits: a message of the topic's next incarnation
            # may open a group again meanwhile (`ReplicaOpener.open_on_message`), and the
            # storage thread runs that opening after these deletions, not between them
            await self.multiraft.run_storage(partial(delete_replicas, stopped, self.journal))
        opener, node_id = self.opener, self.config.node_id
        on_disk = await asyncio.to_thread(opener.dirs_on_disk, list(self.topics))
        opener.forget_deleted()
        looked = 0
        for spec in list(self.topics.values()):
            present = on_disk.get(spec.name, set())
            for index in range(spec.partitions):
                looked += 1
                if not looked % YIELD_EVERY_PARTITIONS:
                    await asyncio.sleep(0)  # the loop's other work (ticks, SWIM) between chunks
                if opener.knows(f"{spec.name}/{index}"):
                    continue
                assigned = spec.assignment[index] if index < len(spec.assignment) else ()
                if node_id in assigned:
                    opener.queue(spec, index, Configuration(voters=frozenset(assigned)))
                elif str(index) in present:
                    opener.queue(spec, index, Configuration())
        if self.topics:
            for topic in os.listdir(self.partitions_dir):
                if topic not in self.topics:
                    path = os.path.join(self.partitions_dir, topic)
                    if not any(r.topic == topic for r in self.multiraft.replicas.values()):
                        await asyncio.to_thread(shutil.rmtree, path, True)
            # the hard states kept for retired replicas (and any other left behind) of topics
            # that no longer exist
            await self.multiraft.run_storage(
                partial(
                    forget_states_of_deleted_topics,
                    self.journal,
                    set(self.topics),
                    set(self.multiraft.replicas),
                )
            )

    def _local_state(self) -> tuple[int, int, int, int]:
        """What a comparison with the topics depends on besides them: the replicas removed,
        retired, quarantined here, and the groups an opening dropped (`ReplicaOpener.dropped`).
        Not a replica moving from the queue to hosted: known before and after, it changes
        nothing the comparison finds (while 60,000 replicas opened, it made a walk of every
        partition due every 5 s)."""
        opener = self.opener
        return (
            self.multiraft.removed_version,
            len(opener.retired),
            len(self.multiraft.quarantine),
            opener.dropped,
        )

    def deleted(self, replica: Replica) -> bool:
        """Is the replica's topic gone, or deleted and created again (another uid)?"""
        spec = self.topics.get(replica.topic)
        if spec is None:
            return True
        return bool(replica.topic_uid and spec.uid and replica.topic_uid != spec.uid)
