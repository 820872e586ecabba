"""Consumer groups on a node: a `consumers.Coordinator` for each partition of the internal topic
`__groups` (`proto.groups`) that this node leads, fed from that partition's log and carried out
through it.

    coordinator of group G  ==  leader of  __groups/group_partition(G, partitions)
    a coordinator's state   ==  Coordinator.load of every committed record value of its
                                partition, in log order (`cluster.groups_log`)

`GroupHost` keeps one `PartitionCoordinator` (`cluster.groups_slot`: loading, then serving one
request at a time, answering after commit) per partition this node leads, per term: on every
tick (its `Ticker`, `CoordinatorConfig.tick_ms`) and every request it looks at the partition's
replica, drops the slot when this node no longer leads it in that term (or the replica changed),
and builds one when it leads and has none. A slot that dropped itself is rebuilt from the log at
the next look if this node still leads: after a failed write always, after a failure of the core
at most `MAX_REBUILDS_PER_TERM` times a term, after an entry it cannot read (a newer node wrote
it) not before leadership changes. Ticks reach every serving coordinator (expired sessions).

`__groups` is created by the first group request that finds it missing (`ensure_topic`), through
the node's normal topic admin (a controller decides; "already exists" from a concurrent creator
is fine), with `group_partitions` partitions and replication factor min(3, live members).
Requests are refused with `CoordinatorLoading` until the node has loaded the topic table (a
coordinator that knows no topic would revoke every partition).

Queues (groups of kind "queue", `cluster.queues_service`) ride on the same slots: their calls
are refused (`CoordinatorUnavailable`, naming the versions) while a replica of the partition runs
a version that does not read queue entries (`cluster.versions`); each slot copies the dead
letters its core decided (`cluster.dead_letters`); a receive that found nothing waits for the
next tick (`next_tick`) to ask again. `FLOTILLA_COORDINATOR_FAULTS` (TEST-ONLY,
`cluster.coordinator_faults`) builds the coordinators with deliberate bugs.

Everything runs on the event loop, except a replay's reads (a thread; the segmented log only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from cluster.clock import Ticker, ticker_or_loop
from cluster.controller import TopicSpec
from cluster.coordinator_faults import NodeFaults, faults_from_env
from cluster.dead_letters import DeadLetterSink
from cluster.errors import ClusterError, TopicExists
from cluster.groups_gauges import REFRESH_S, GaugeKeeper
from cluster.groups_slot import (
    CoordinatorLoading,
    CoordinatorUnavailable,
    Failure,
    NotCoordinator,
    Op,
    PartitionCoordinator,
    Shell,
)
from cluster.metrics import GroupGauges
from cluster.multiraft import Proposal
from cluster.queue_source import SourceReader, Stub
from cluster.replica import Replica
from cluster.versions import QUEUE_ENTRIES_SINCE, reads_group_entries, reads_queue_entries
from consumers import Coordinator, CoordinatorConfig, TopicMeta
from consumers.queue_types import QueuePartitionView
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, is_internal
from raft.types import Role

__all__ = [
    "CoordinatorLoading",
    "CoordinatorUnavailable",
    "GroupHost",
    "NotCoordinator",
    "Op",
]

log = logging.getLogger("flotilla.groups")

# Rebuilds of one partition's coordinator after a failure of the core, per term, before this
# node stops serving that partition's groups until leadership changes.
MAX_REBUILDS_PER_TERM = 3
# How long a request waits for `__groups` to be created before it is told to retry.
CREATE_WAIT_S = 2.0


class GroupHost:
    def __init__(
        self,
        node_id: str,
        *,
        topics: Callable[[], Mapping[str, TopicSpec]],
        topics_loaded: Callable[[], bool],
        refresh_topics: Callable[[], Awaitable[None]],
        replica: Callable[[str], Replica | None],
        propose: Callable[[Proposal], None],
        wake: Callable[[str], None],
        raft_tick_s: float,
        create_topic: Callable[[pb.CreateTopicRequest], Awaitable[object]],
        live_members: Callable[[], int],
        metadata: Callable[[list[str]], Awaitable[pb.MetadataResponse]],
        group_partitions: int,
        write_timeout_s: float,
        config: CoordinatorConfig | None = None,
        ticker: Ticker | None = None,
        member_version: Callable[[str], str | None] = lambda member_id: None,
        pause_guard_s: float = 0.0,
        stub: Callable[[str], Stub | None] | None = None,
        faults: NodeFaults | None = None,
        latest_topic: Callable[[str], Awaitable[TopicSpec | None]] | None = None,
    ) -> None:
        """`metadata(topics)`: the node's metadata view (high watermarks for the lag gauges).
        `member_version(id)`: the version a member advertises in gossip (None: unknown); a
        partition's groups are served only once no replica of it is known to run a version
        older than the group entries (`cluster.versions`: a rolling upgrade).
        `pause_guard_s` (0: off): after the event loop stood still this long (the process was
        paused, e.g. SIGSTOP), nothing is answered for as long again (`paused`).
        `stub(member id)`: a client stub of a member (this node's included), for the reads of
        queue source records and the dead-letter copies (None: no dead letter is copied).
        `faults`: TEST-ONLY; default what `FLOTILLA_COORDINATOR_FAULTS` names.
        `latest_topic(name)`: the topic as the control plane has it now
        (`cluster.topic_latest`); by default this node's table after a refresh."""
        self.node_id = node_id
        self.config = config = config or CoordinatorConfig()
        self.ticker = ticker_or_loop(ticker, config.tick_ms / 1000)
        self.faults = faults if faults is not None else faults_from_env()
        self.source = SourceReader(
            topics=topics, replica=replica, metadata=metadata, stub=stub or (lambda member: None)
        )
        sink = None
        if stub is not None:

            async def refreshed(name: str) -> TopicSpec | None:
                await refresh_topics()
                return topics().get(name)

            sink = DeadLetterSink(
                topics=topics, create_topic=create_topic, refresh_topics=refresh_topics,
                latest_topic=latest_topic or refreshed, source=self.source, stub=stub,
            )  # fmt: skip
        self.shell = Shell(
            node_id, config, replica, propose, wake, raft_tick_s, write_timeout_s,
            self.topic_meta, refresh_topics, self.paused, sink, self.faults,
        )  # fmt: skip
        self._ticked = asyncio.Event()
        self.pause_guard_s = pause_guard_s
        self._last_tick_at = 0.0  # loop time of the last tick
        self._quiet_until = 0.0
        self._topics = topics
        self._topics_loaded = topics_loaded
        self._create_topic = create_topic
        self._live_members = live_members
        self._member_version = member_version
        self.group_partitions = group_partitions
        self._slots: dict[int, PartitionCoordinator] = {}
        # partition -> (replica, term, failures of the core this term)
        self._failures: dict[int, tuple[Replica, int, int]] = {}
        self._creating: asyncio.Task[None] | None = None
        self._meta_source: Mapping[str, TopicSpec] | None = None
        self._meta: dict[str, TopicMeta] = {}
        self.gauge_keeper = GaugeKeeper(metadata)
        self._gauges_task: asyncio.Task[None] | None = None
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.faults.warn()
        self._started = True
        self._last_tick_at = asyncio.get_running_loop().time()
        self.ticker.start(self._on_tick)
        self._gauges_task = asyncio.get_running_loop().create_task(self._refresh_gauges())

    async def stop(self) -> None:
        self._started = False
        await self.ticker.stop()
        tasks = [t for t in (self._gauges_task, self._creating) if t is not None]
        for slot in list(self._slots.values()):
            tasks.append(slot.task)
            slot.drop(NotCoordinator(f"node {self.node_id} is stopping", None))
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- what the service asks ------------------------------------------------------------------
    @property
    def partitions(self) -> int | None:
        """The partition count of `__groups`, None while it does not exist."""
        spec = self._topics().get(GROUPS_TOPIC)
        return None if spec is None else spec.partitions

    def topic_meta(self) -> Mapping[str, TopicMeta]:
        """What the core knows of the (client) topics: incarnation and partition count."""
        topics = self._topics()
        if topics is not self._meta_source:  # the topic table is replaced, never edited
            self._meta = {
                name: TopicMeta(spec.uid, spec.partitions)
                for name, spec in topics.items()
                if not is_internal(name)
            }
            self._meta_source = topics
        return self._meta

    async def ensure_topic(self) -> int:
        """The partition count of `__groups`, creating the topic first if it is missing.
        Raises `CoordinatorLoading` while it is not there yet."""
        count = self.partitions
        if count is not None:
            return count
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())
        try:  # a caller waits a little, then retries (the creation goes on)
            await asyncio.wait_for(asyncio.shield(self._creating), CREATE_WAIT_S)
        except TimeoutError:
            raise CoordinatorLoading(f"{GROUPS_TOPIC} is being created; retry shortly") from None
        except ClusterError as error:
            raise CoordinatorLoading(f"{GROUPS_TOPIC} is being created: {error}") from None
        count = self.partitions
        if count is None:
            raise CoordinatorLoading(f"{GROUPS_TOPIC} is being created; retry shortly")
        return count

    async def _create(self) -> None:
        factor = max(1, min(3, self._live_members()))
        request = pb.CreateTopicRequest(
            name=GROUPS_TOPIC, partitions=self.group_partitions, replication_factor=factor
        )
        try:
            await self._create_topic(request)
        except TopicExists:  # another node created it first (perhaps of another shape)
            return
        log.info("created %s: partitions=%d replication_factor=%d", GROUPS_TOPIC,
                 self.group_partitions, factor)  # fmt: skip

    async def call(self, partition: int, group: str, op: Op, *, queue: bool = False) -> Any:
        """Runs `op` on the coordinator of `partition` (in turn with every other call to it) and
        returns its reply once its entries committed. Raises `GroupError` (refused, nothing
        changed), `NotCoordinator`, `CoordinatorLoading` or `CoordinatorUnavailable` (also for
        a `queue` call while a replica of the partition cannot read queue entries yet)."""
        if not self._topics_loaded():
            raise CoordinatorLoading(
                f"node {self.node_id} is starting: topic metadata is not loaded yet"
            )
        if self.paused():
            raise CoordinatorLoading(
                f"node {self.node_id} was paused: it answers group calls again once it is sure "
                "no other coordinator took over; retry shortly"
            )
        slot = self._look(partition)
        if slot is None:
            raise self._refusal(partition)
        if slot.coordinator is None:
            raise CoordinatorLoading(
                f"node {self.node_id} is loading the groups of {GROUPS_TOPIC}/{partition}; "
                "retry shortly"
            )
        if queue and (old := self._older_replicas(slot.replica, reads_queue_entries)):
            since = ".".join(map(str, QUEUE_ENTRIES_SINCE))
            raise CoordinatorUnavailable(
                f"{GROUPS_TOPIC}/{partition}'s replicas do not all read queue entries yet "
                f"({', '.join(old)}; queues need {since} or later): finish the rolling upgrade"
            )
        return await slot.submit(group, op)

    def coordinator(self, partition: int) -> Coordinator | None:
        """The coordinator of `partition` if this node serves it now: for reads between rounds
        (a queue's key window), never for changes."""
        slot = self._slots.get(partition)
        return slot.coordinator if slot is not None and slot.leads() else None

    async def next_tick(self, timeout_s: float) -> None:
        """Waits for the next coordinator tick (at most `timeout_s`)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ticked.wait(), timeout_s)

    def serves(self, partition: int) -> bool:
        """Does this node coordinate the groups of `partition` now (loaded)?"""
        slot = self._slots.get(partition)
        return slot is not None and slot.coordinator is not None and slot.leads()

    def _refusal(self, partition: int) -> ClusterError:
        group = f"{GROUPS_TOPIC}/{partition}"
        replica = self.shell.replica(group)
        if replica is None:
            return NotCoordinator(
                f"node {self.node_id} holds no replica of {group}, whose leader coordinates "
                "the group",
                None,
            )
        node = replica.node
        if node.role is Role.LEADER and (old := self._older_replicas(replica)):
            return CoordinatorUnavailable(
                f"{group}'s replicas do not all read consumer-group entries yet "
                f"({', '.join(old)}): finish the rolling upgrade"
            )
        if node.role is Role.LEADER:  # leads, but the core failed this term
            return CoordinatorUnavailable(
                f"node {self.node_id} leads {group} but cannot serve its groups (see its log)"
            )
        if node.leader_id is None:
            return CoordinatorLoading(f"{group} has no leader yet; retry shortly")
        return NotCoordinator(
            f"node {self.node_id} does not coordinate the groups of {group}: {node.leader_id} does",
            node.leader_id,
        )

    # -- ticks and leadership ---------------------------------------------------------------------
    def paused(self) -> bool:
        """Was the process paused a moment ago (no tick for `pause_guard_s`, or less than that
        since)? Then its Raft leases, counted in ticks that did not pass, may be stale: another
        coordinator may have been elected meanwhile, and it has not heard yet."""
        if not self.pause_guard_s:
            return False
        now = asyncio.get_running_loop().time()
        return now - self._last_tick_at > self.pause_guard_s or now < self._quiet_until

    def _on_tick(self, at: float) -> None:
        now = asyncio.get_running_loop().time()
        if self.pause_guard_s and now - self._last_tick_at > self.pause_guard_s:
            self._quiet_until = now + self.pause_guard_s
            log.info("no tick for %.1f s (paused?): group calls wait %.1f s for news of a new "
                     "coordinator", now - self._last_tick_at, self.pause_guard_s)  # fmt: skip
        self._last_tick_at = now
        ticked, self._ticked = self._ticked, asyncio.Event()
        ticked.set()
        count = self.partitions or 0
        for partition in [p for p in self._slots if p >= count]:
            self._slots[partition].drop(NotCoordinator(f"{GROUPS_TOPIC} is gone", None))
        for partition in range(count):
            slot = self._look(partition)
            if slot is not None:
                slot.tick()

    def _look(self, partition: int) -> PartitionCoordinator | None:
        """The slot of `partition` as leadership now says: dropped if this node no longer leads
        it in the slot's term, built (loading) if it leads it and has none."""
        replica = self.shell.replica(f"{GROUPS_TOPIC}/{partition}")
        slot = self._slots.get(partition)
        if slot is not None and not slot.leads():
            leader = replica.node.leader_id if replica is not None else None
            where = f"{leader} does" if leader else "no leader is known yet"
            slot.drop(
                NotCoordinator(
                    f"node {self.node_id} no longer coordinates the groups of "
                    f"{GROUPS_TOPIC}/{partition}: {where}",
                    leader,
                )
            )
            slot = None
        if slot is not None or replica is None or replica.node.role is not Role.LEADER:
            return slot
        if not self._started or self._older_replicas(replica):
            return None
        failed = self._failures.get(partition)
        if failed is not None and failed == (replica, replica.node.term, MAX_REBUILDS_PER_TERM):
            return None  # the core failed too often this term: refused until leadership moves
        slot = PartitionCoordinator(partition, replica, self.shell, self._dropped)
        self._slots[partition] = slot
        return slot

    def _older_replicas(
        self,
        replica: Replica,
        reads: Callable[[str | None], bool | None] = reads_group_entries,
    ) -> list[str]:
        """`<id> runs <version>` of each replica known to run a version that `reads` says does
        not read the entries (by default: group entries)."""
        old = []
        for member_id in sorted(replica.node.configuration.members):
            version = self._member_version(member_id)
            if reads(version) is False:
                old.append(f"{member_id} runs {version}")
        return old

    def _dropped(self, slot: PartitionCoordinator, failure: Failure) -> None:
        if self._slots.get(slot.partition) is slot:
            del self._slots[slot.partition]
        if slot.coordinator is not None:  # its groups' gauges are the next coordinator's
            self.gauge_keeper.forget(slot.coordinator.groups())
        if failure in (Failure.CORE, Failure.UNREADABLE):
            before = self._failures.get(slot.partition)
            same_term = before is not None and before[:2] == (slot.replica, slot.term)
            count = min(before[2] + 1, MAX_REBUILDS_PER_TERM) if before and same_term else 1
            if failure is Failure.UNREADABLE:
                count = MAX_REBUILDS_PER_TERM
            self._failures[slot.partition] = (slot.replica, slot.term, count)

    # -- gauges -----------------------------------------------------------------------------------
    @property
    def gauges(self) -> GroupGauges:
        """The lag and member gauges of the groups this node coordinates (scrape time)."""
        return self.gauge_keeper.gauges

    def note_group(
        self,
        group: str,
        members: int,
        lags: Iterable[tuple[str, int, int]],
        queue: Iterable[QueuePartitionView] = (),
    ) -> None:
        """A describe's fresh figures for `group`: members, (topic, partition, lag), and a
        queue group's partitions."""
        self.gauge_keeper.note_group(group, members, lags, queue)

    async def _refresh_gauges(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            coordinators = [s.coordinator for s in self._slots.values() if s.coordinator]
            try:
                await self.gauge_keeper.refresh(coordinators, self.topic_meta())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing the group gauges failed")
