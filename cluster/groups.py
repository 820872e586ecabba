"""Consumer groups on a node: a `consumers.Coordinator` for each partition of the internal topic
`__groups` (`proto.groups`) that this node leads, fed from that partition's log and carried out
through it.

    coordinator of group G  ==  leader of  __groups/group_partition(G, partitions)
    a coordinator's state   ==  Coordinator.load of every committed record value of its
                                partition, in log order (replay; no checkpoint yet)

Lifecycle of one partition's coordinator (`_Slot`), checked every tick and on every request:

1. **Loading.** When this node leads the partition in a term, the slot waits until the replica
   has applied every entry its log held at that moment (the leader's own no-op commits them all),
   then reads the committed records off the event loop (a thread; `proto.records.decode_batch`),
   `load`s each value into a new `Coordinator`, brings the node's topic table up to date (one
   a poll behind would lack a topic the last coordinator assigned, and revoke its partitions)
   and `start`s it (every loaded member's session starts now: a failover alone moves no
   partition). Until then, and while the node has not loaded the topic table at all, requests
   get `CoordinatorLoading`.
2. **Serving.** One worker task per coordinator runs the requests one after another, with the
   ticks that came meanwhile: it calls the core (which applies its decision to its state at once
   and returns the entries recording it), appends the entries of the calls it took as one
   record batch (key = group name; tick entries have no key) through the normal propose path
   (acks=all), and answers every call only once that batch committed. So the next call, and a
   read (describe, offsets, list), only ever sees state that is committed, or its own.
   Requests and ticks that decide nothing write nothing (idle groups cost no Raft write); their
   answers wait for the replica's Raft lease instead (`RaftNode.lease_read_index`), so a leader
   cut off from the others, which a new coordinator may already have overtaken, answers no
   stale assignment or offset. (The lease assumes the process is not paused: a coordinator
   resumed from SIGSTOP may answer from its state until it hears of the new term.)
3. **Dropping.** Leadership lost (or the term changed, or the replica reopened): the slot goes;
   calls not yet taken get `NotCoordinator`, calls whose write was in flight `CoordinatorUnavailable`
   (the outcome is unknown). An append that fails (not leader, dropped, timed out) drops the slot
   too; the next tick rebuilds it from the log if this node still leads. An entry the core cannot
   read (`UnknownEntry`: a newer node wrote it) stops this partition's groups on this node for
   the term rather than guess.

`__groups` is created by the first group request that finds it missing (`ensure_topic`), through
the node's normal topic admin (a controller decides; "already exists" from a concurrent creator is
fine), with `group_partitions` partitions and replication factor min(3, live members).

Everything runs on the event loop except the replay's reads, which touch only the segmented log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.clock import Ticker, ticker_or_loop
from cluster.controller import TopicSpec
from cluster.errors import ClusterError, TopicExists
from cluster.failstop import NodeFailStopped
from cluster.metrics import GroupGauges
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from consumers import Coordinator, CoordinatorConfig, GroupError, Outcome, TopicMeta
from consumers.coordinator import UnknownEntry
from proto import flotilla_pb2 as pb
from proto.groups import GROUPS_TOPIC, is_internal
from proto.records import decode_batch, encode_batch
from raft.types import Role
from storage import LogClosed

__all__ = [
    "CoordinatorLoading",
    "CoordinatorUnavailable",
    "GroupHost",
    "NotCoordinator",
    "Op",
]

log = logging.getLogger("flotilla.groups")

# Calls one worker round takes at most: their entries go out as one batch (one Raft write).
MAX_CALLS_PER_WRITE = 64
# Bytes of entries per record batch appended (a larger write is split into several batches).
MAX_WRITE_BYTES = 1024 * 1024
# The replay reads the partition this much at a time.
REPLAY_RECORDS = 10_000
REPLAY_BYTES = 4 * 1024 * 1024
# Rebuilds of one partition's coordinator after a failure of the core, per term, before this
# node stops serving that partition's groups until leadership changes.
MAX_REBUILDS_PER_TERM = 3
# How long an answer that wrote nothing waits for the Raft lease that confirms leadership.
LEASE_WAIT_S = 1.0
# How long a request waits for `__groups` to be created before it is told to retry.
CREATE_WAIT_S = 2.0
# How often the lag and member gauges are refreshed from the coordinators.
GAUGES_REFRESH_S = 10.0

# A request to a coordinator: run on the worker with the topics' metadata; returns an `Outcome`
# (entries to append, reply sent once they commit) or a plain value (a read); raises GroupError.
Op = Callable[[Coordinator, Mapping[str, TopicMeta]], Any]


class NotCoordinator(ClusterError):
    """This node does not coordinate the partition's groups; `leader_id` does, when known."""

    def __init__(self, message: str, leader_id: str | None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class CoordinatorLoading(ClusterError):
    """The coordinator is loading (or `__groups` is being created, or has no leader yet)."""


class CoordinatorUnavailable(ClusterError):
    """The request's write failed or its outcome is unknown, or this node cannot serve the
    partition's groups (an entry it cannot read); a retry may succeed elsewhere."""


@dataclass(slots=True, eq=False)
class _Call:
    group: str
    op: Op
    future: asyncio.Future[Any]


@dataclass(slots=True, eq=False)
class _Slot:
    """One `__groups` partition this node leads, in one term."""

    partition: int
    replica: Replica
    term: int
    coordinator: Coordinator | None = None  # None while loading
    calls: deque[_Call] = field(default_factory=deque)
    ticks_due: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    in_flight: list[_Call] = field(default_factory=list)


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
    ) -> None:
        """`metadata(topics)`: the node's metadata view (high watermarks for the lag gauges)."""
        self.node_id = node_id
        self.config = config = config or CoordinatorConfig()
        self.ticker = ticker_or_loop(ticker, config.tick_ms / 1000)
        self._topics = topics
        self._topics_loaded = topics_loaded
        self._refresh_topics = refresh_topics
        self._replica = replica
        self._propose = propose
        self._wake = wake
        self.raft_tick_s = raft_tick_s
        self._create_topic = create_topic
        self._live_members = live_members
        self._metadata = metadata
        self.group_partitions = group_partitions
        self.write_timeout_s = write_timeout_s
        self._slots: dict[int, _Slot] = {}
        # partition -> (replica, term, failures): rebuilds after a failure of the core this term
        self._failures: dict[int, tuple[Replica, int, int]] = {}
        self._creating: asyncio.Task[None] | None = None
        self._meta_source: Mapping[str, TopicSpec] | None = None
        self._meta: dict[str, TopicMeta] = {}
        self._gauges = GroupGauges()
        self._gauges_task: asyncio.Task[None] | None = None
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._started = True
        self.ticker.start(self._on_tick)
        self._gauges_task = asyncio.get_running_loop().create_task(self._refresh_gauges_forever())

    async def stop(self) -> None:
        await self.ticker.stop()
        tasks = [t for t in (self._gauges_task, self._creating) if t is not None]
        for slot in list(self._slots.values()):
            self._drop(slot, NotCoordinator("the node is stopping", None))
            if slot.task is not None:
                tasks.append(slot.task)
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
        Raises `CoordinatorLoading` while it cannot be created yet."""
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
            pass
        log.info("created %s: partitions=%d replication_factor=%d", GROUPS_TOPIC,
                 self.group_partitions, factor)  # fmt: skip

    async def call(self, partition: int, group: str, op: Op) -> Any:
        """Runs `op` on the coordinator of `partition` (in turn with every other call to it) and
        returns its reply once its entries committed. Raises `GroupError` (refused, nothing
        changed), `NotCoordinator`, `CoordinatorLoading` or `CoordinatorUnavailable`."""
        if not self._topics_loaded():
            # a coordinator that does not know the topics would revoke every partition
            raise CoordinatorLoading(
                f"node {self.node_id} is starting: topic metadata is not loaded yet"
            )
        slot = self._reconcile(partition)
        if slot is None:
            raise self._refusal(partition)
        if slot.coordinator is None:
            raise CoordinatorLoading(
                f"node {self.node_id} is loading the groups of {GROUPS_TOPIC}/{partition}; "
                "retry shortly"
            )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        slot.calls.append(_Call(group, op, future))
        slot.wake.set()
        return await future

    def _refusal(self, partition: int) -> ClusterError:
        group = f"{GROUPS_TOPIC}/{partition}"
        replica = self._replica(group)
        if replica is None:
            return NotCoordinator(
                f"node {self.node_id} holds no replica of {group}, whose leader coordinates "
                "the group",
                None,
            )
        node = replica.node
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
    def _on_tick(self, at: float) -> None:
        count = self.partitions or 0
        for partition in [p for p in self._slots if p >= count]:
            self._drop(self._slots[partition], NotCoordinator(f"{GROUPS_TOPIC} is gone", None))
        for partition in range(count):
            slot = self._reconcile(partition)
            if slot is not None and slot.coordinator is not None:
                slot.ticks_due += 1
                slot.wake.set()

    def _reconcile(self, partition: int) -> _Slot | None:
        """The slot of `partition` as leadership now says: dropped if this node no longer leads
        it in the slot's term, created (loading) if it leads it and has none."""
        replica = self._replica(f"{GROUPS_TOPIC}/{partition}")
        slot = self._slots.get(partition)
        leads = replica is not None and replica.node.role is Role.LEADER
        if slot is not None and not self._still_leads(slot):
            leader = replica.node.leader_id if replica is not None else None
            self._drop(slot, NotCoordinator(self._moved(partition, leader), leader))
            slot = None
        if slot is None and leads and self._started:
            assert replica is not None
            failed = self._failures.get(partition)
            term = replica.node.term
            if (
                failed is not None
                and failed[:2] == (replica, term)
                and failed[2] >= MAX_REBUILDS_PER_TERM
            ):
                return None
            slot = _Slot(partition, replica, term)
            self._slots[partition] = slot
            slot.task = asyncio.get_running_loop().create_task(self._run(slot))
        return slot

    def _still_leads(self, slot: _Slot) -> bool:
        replica = self._replica(slot.replica.group)
        return (
            replica is slot.replica
            and replica.node.role is Role.LEADER
            and replica.node.term == slot.term
        )

    def _moved(self, partition: int, leader: str | None) -> str:
        where = f"{leader} does" if leader else "no leader is known yet"
        return (
            f"node {self.node_id} no longer coordinates the groups of {GROUPS_TOPIC}/{partition}:"
            f" {where}"
        )

    def _drop(self, slot: _Slot, error: ClusterError) -> None:
        """Forgets `slot`: calls not taken yet get `error`; calls whose write is in flight get
        `CoordinatorUnavailable` (their outcome is unknown)."""
        if self._slots.get(slot.partition) is slot:
            del self._slots[slot.partition]
        unknown = CoordinatorUnavailable(
            f"leadership of {GROUPS_TOPIC}/{slot.partition} changed before the write committed;"
            " the outcome is unknown: retry"
        )
        for call in slot.in_flight:
            _fail(call.future, unknown)
        for call in slot.calls:
            _fail(call.future, error)
        slot.in_flight.clear()
        slot.calls.clear()
        if slot.coordinator is not None:  # its groups' gauges are the next coordinator's
            gone = set(slot.coordinator.groups())
            self._gauges = GroupGauges(
                {k: v for k, v in self._gauges.lag.items() if k[0] not in gone},
                {k: v for k, v in self._gauges.members.items() if k not in gone},
            )
        slot.coordinator = None
        if slot.task is not None and slot.task is not asyncio.current_task():
            slot.task.cancel()

    def _failed(self, slot: _Slot, why: str, *, final: bool = False) -> None:
        """The core failed (or cannot read the log): drop the slot; rebuild it at most
        MAX_REBUILDS_PER_TERM times this term (never, if `final`)."""
        before = self._failures.get(slot.partition)
        count = (
            before[2] + 1 if before is not None and before[:2] == (slot.replica, slot.term) else 1
        )
        if final:
            count = MAX_REBUILDS_PER_TERM
        self._failures[slot.partition] = (slot.replica, slot.term, count)
        self._drop(slot, CoordinatorUnavailable(why))

    # -- one coordinator: load, then serve -------------------------------------------------------
    async def _run(self, slot: _Slot) -> None:
        try:
            coordinator = await self._load(slot)
            if coordinator is None:
                return
            slot.coordinator = coordinator
            await self._serve(slot, coordinator)
        except asyncio.CancelledError:
            raise
        except NodeFailStopped:
            self._drop(slot, CoordinatorUnavailable("the node is stopping on a storage failure"))
        except Exception as error:
            log.exception("the coordinator of %s/%d failed", GROUPS_TOPIC, slot.partition)
            self._failed(slot, f"the coordinator of {GROUPS_TOPIC}/{slot.partition} failed: "
                               f"{type(error).__name__}: {error}")  # fmt: skip

    async def _load(self, slot: _Slot) -> Coordinator | None:
        replica = slot.replica
        started = time.monotonic()
        target = replica.node.log.last_index  # every entry up to here commits with our no-op
        while replica.node.applied_index < target:
            if not self._still_leads(slot):
                return None  # the next tick drops the slot
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(replica.hw_changed.wait(), self.ticker.interval_s)
        try:
            coordinator, records = await asyncio.to_thread(_replay, replica, self.config)
        except UnknownEntry as error:
            log.error("cannot serve the groups of %s: %s", replica.group, error)
            self._failed(
                slot,
                f"node {self.node_id} cannot read the group state of {replica.group} "
                f"({error}); it was written by a newer version",
                final=True,
            )
            return None
        except LogClosed:
            self._drop(slot, NotCoordinator(f"{replica.group} closed while loading", None))
            return None
        # the topic table as of now: a table a poll behind would lack a topic the last
        # coordinator assigned, and revoke its partitions from their members
        try:
            await self._refresh_topics()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the poll's own retry is the next one; serve with this table
            log.warning("refreshing the topics before serving %s failed: %s", replica.group, error)
        if not self._still_leads(slot):
            return None
        coordinator.start()
        log.info("coordinating the groups of %s: term=%d records=%d load_ms=%d", replica.group,
                 slot.term, records, int((time.monotonic() - started) * 1000))  # fmt: skip
        return coordinator

    async def _serve(self, slot: _Slot, coordinator: Coordinator) -> None:
        while True:
            if not slot.calls and not slot.ticks_due:
                slot.wake.clear()
                await slot.wake.wait()
            if not self._still_leads(slot):
                return  # the next tick (or call) drops the slot
            ticks, slot.ticks_due = slot.ticks_due, 0
            taken: list[_Call] = []
            while slot.calls and len(taken) < MAX_CALLS_PER_WRITE:
                call = slot.calls.popleft()
                if not call.future.done():  # a caller that gave up is not served
                    taken.append(call)
            slot.in_flight = taken
            topics = self.topic_meta()
            entries: list[tuple[str | None, bytes]] = []
            for _ in range(ticks):
                entries.extend((None, entry) for entry in coordinator.tick())
            answers: list[tuple[_Call, Any, GroupError | None]] = []
            for call in taken:
                try:
                    outcome = call.op(coordinator, topics)
                except GroupError as error:
                    answers.append((call, None, error))
                    continue
                if isinstance(outcome, Outcome):
                    entries.extend((call.group, entry) for entry in outcome.entries)
                    outcome = outcome.reply
                answers.append((call, outcome, None))
            if entries:
                if not await self._append(slot, entries):
                    return
            elif taken and not await self._confirm_lease(slot):
                # a leader cut off (a new one may have changed the state since): answer nothing
                # from what may be stale; the next tick drops the slot if leadership moved
                slot.in_flight = []
                for call in taken:
                    _fail(call.future, CoordinatorUnavailable(
                        f"node {self.node_id} cannot confirm it still leads {slot.replica.group}"
                        " (no quorum heard lately); retry"
                    ))  # fmt: skip
                continue
            slot.in_flight = []
            for call, reply, refusal in answers:
                if refusal is not None:
                    _fail(call.future, refusal)
                elif not call.future.done():
                    call.future.set_result(reply)

    async def _confirm_lease(self, slot: _Slot) -> bool:
        """Does this node still lead the partition, by its Raft lease (no other leader can have
        been elected meanwhile)? A quiesced leader is woken to renew it. Answers that wrote
        nothing rest on it, so a leader cut off from the others serves no stale state."""
        replica = slot.replica
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEASE_WAIT_S
        while self._still_leads(slot):
            if replica.node.lease_read_index() is not None:
                return True
            if loop.time() >= deadline:
                break
            replica.idle_ticks = 0  # members still ask: keep the lease fresh, do not quiesce
            if replica.node.quiesced:
                self._wake(replica.group)
            await asyncio.sleep(self.raft_tick_s)
        return False

    async def _append(self, slot: _Slot, entries: list[tuple[str | None, bytes]]) -> bool:
        """Appends the entries as record batches (acks=all) and waits for their commit. On a
        failure, drops the slot (its state holds entries that may never commit) and says so."""
        loop = asyncio.get_running_loop()
        now_ms = int(time.time() * 1000)
        futures = []
        for chunk in _chunks(entries, MAX_WRITE_BYTES):
            batch = encode_batch([(_key(k), value, None, now_ms) for k, value in chunk])
            waiter = Waiter(loop.create_future())
            self._propose(Proposal(slot.replica, batch, len(chunk), now_ms, waiter))
            futures.append(waiter.future)
        try:
            await asyncio.wait_for(asyncio.gather(*futures), self.write_timeout_s)
            return True
        except asyncio.CancelledError:
            raise
        except NodeFailStopped:
            raise
        except Exception as error:  # NotLeader, ProposalDropped, NotCommitted, TimeoutError
            reason = str(error) or type(error).__name__
            log.info("a write to %s failed (%s): the coordinator is rebuilt from the log",
                     slot.replica.group, reason)  # fmt: skip
            self._drop(
                slot,
                CoordinatorUnavailable(
                    f"the write to {slot.replica.group} failed ({reason}); retry"
                ),
            )
            return False

    # -- gauges -----------------------------------------------------------------------------------
    @property
    def gauges(self) -> GroupGauges:
        """The lag and member gauges of the groups this node coordinates (scrape time)."""
        return self._gauges

    def note_group(self, group: str, members: int, lags: Iterable[tuple[str, int, int]]) -> None:
        """A describe's fresh figures for `group` (members, and (topic, partition, lag))."""
        lag = {k: v for k, v in self._gauges.lag.items() if k[0] != group}
        lag.update({(group, topic, partition): value for topic, partition, value in lags})
        self._gauges = GroupGauges(lag, {**self._gauges.members, group: members})

    async def _refresh_gauges_forever(self) -> None:
        while True:
            await asyncio.sleep(GAUGES_REFRESH_S)
            try:
                await self.refresh_gauges()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing the group gauges failed")

    async def refresh_gauges(self) -> None:
        topics = self.topic_meta()
        committed: dict[tuple[str, str, int], int | None] = {}
        members: dict[str, int] = {}
        for slot in list(self._slots.values()):
            coordinator = slot.coordinator
            if coordinator is None:
                continue
            for group in coordinator.groups():
                try:
                    view = coordinator.describe(group, topics)
                except GroupError:
                    continue
                members[group] = len(view.members)
                for partition in view.partitions:
                    committed[(group, partition.topic, partition.partition)] = partition.committed
        names = sorted({topic for _, topic, _ in committed} & set(self._topics()))
        marks = high_watermarks(await self._metadata(names)) if names else {}
        lag = {}
        for key, offset in committed.items():
            mark = marks.get(key[1:])
            if mark is not None:
                lag[key] = group_lag(*mark, offset)
        self._gauges = GroupGauges(lag, members)


def group_lag(high_watermark: int, log_start: int, committed: int | None) -> int:
    """Records a group has yet to consume in a partition: from its committed offset, or from
    the log start when it committed none."""
    return max(0, high_watermark - (log_start if committed is None else committed))


def high_watermarks(metadata: pb.MetadataResponse) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (high watermark, log start)} of a metadata answer."""
    return {
        (topic.name, info.index): (info.high_watermark, info.log_start)
        for topic in metadata.topics
        for info in topic.partitions
    }


def _replay(replica: Replica, config: CoordinatorConfig) -> tuple[Coordinator, int]:
    """Reader thread: a coordinator loaded from every committed record of `replica`."""
    coordinator = Coordinator(config)
    offset = replica.segmented.first_offset
    end = replica.high_watermark
    records = 0
    while offset < end:
        batches = replica.read_committed(offset, REPLAY_RECORDS, REPLAY_BYTES)
        if not batches:
            break
        for batch in batches:
            for record in decode_batch(batch.data, batch.base_offset):
                coordinator.load(record.value)
                records += 1
        last = batches[-1]
        offset = last.base_offset + last.record_count
    return coordinator, records


def _chunks(
    entries: list[tuple[str | None, bytes]], max_bytes: int
) -> Iterable[list[tuple[str | None, bytes]]]:
    chunk: list[tuple[str | None, bytes]] = []
    size = 0
    for key, value in entries:
        cost = len(value) + (len(key) if key else 0) + 16
        if chunk and size + cost > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((key, value))
        size += cost
    if chunk:
        yield chunk


def _key(group: str | None) -> bytes | None:
    return group.encode() if group is not None else None


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
