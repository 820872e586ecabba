"""The timer host (DESIGN-26 "Firing, exactly once"): for each timer partition this node holds,
a follower folds the committed timer log (`cluster.timer_log.LogFold`); for each one it leads,
a slot fires the due timers into the source partition.

Follower (every replica): reads the committed batches past `applied_offset` in a thread (never
on the event loop; classifying a batch unpacks its first record only) and folds them, waking the
slot when a batch is accepted.

Slot (the leader, one per term):
1. waits until every entry its log held when it was built is applied (its own term's no-op
   commits them), and the follower has folded them;
2. builds a `TimerBook` from the fold (`restore` + the near window's buckets), then appends the
   book's `last_plan` again (its outcome is unknown after a failover: each repeat is answered
   as a duplicate by the source partition) before anything new;
3. loops: sleeps until the earliest due time (an asyncio timer at that instant, not tick
   granularity) or until a batch due earlier is accepted; then `plan = book.next_plan(now)`,
   appends the plan record (acks=all), `book.planned(plan)` once committed, then appends each
   planned batch to source partition p, in order, unchanged but for its producer:
   `fire_producer_id(uid, p)` at `plan.sequence` + the records before it (`with_producer`),
   through the node's produce path (`cluster.copy_produce`: a refused sequence goes again under
   a producer derived from the pair). The next plan only once every append succeeded; a failed
   append is retried (1 s doubling to 10 s) while the slot leads.

A slot whose leadership ended is dropped; its successor (on whichever node) fires the last plan
again. Timers of a source topic deleted (or recreated) are not fired: their timer log goes with
the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping

import xxhash

from cluster.config import ConfigError
from cluster.controller import TopicSpec
from cluster.copy_produce import CopyProducer
from cluster.errors import ClusterError
from cluster.failstop import NodeFailStopped
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from cluster.timer_log import LogFold, classify, plan_batch
from proto.records import with_producer
from raft.types import Role
from storage import LogClosed
from timers.book import TimerBook
from timers.faults import FAULT_NAMES, NO_FAULTS, TimerFaults
from timers.types import TIMER_TOPIC_PREFIX, Plan, TimerBatch, TimerConfig

__all__ = ["FAULTS_ENV_VAR", "TimerHost", "fire_producer_id", "timer_faults_from_env"]

log = logging.getLogger("flotilla.timers")

READ_BYTES = 4 * 1024 * 1024
READ_RECORDS = 100_000
LOOK_S = 0.1  # how often the host looks for timer partitions gained or lost
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 10.0
Item = tuple[TimerBatch | Plan | None, int]  # (what a batch is, the offset past it)


class Deposed(ClusterError):
    """The slot's leadership ended: its successor fires what is left."""


def fire_producer_id(uid: str, partition: int) -> int:
    """The idempotent producer that fires the timers of source partition `partition` of topic
    incarnation `uid`: the same on every node, so a repeat after a failover is a duplicate."""
    digest = xxhash.xxh64_intdigest(f"{uid}\0{partition}\0timers".encode())
    return (digest & ((1 << 63) - 1)) or 1


def _read_items(replica: Replica, offset: int) -> list[Item]:
    """Reader thread: the committed batches of a timer log from `offset`, classified."""
    items: list[Item] = []
    for stored in replica.read_committed(offset, READ_RECORDS, READ_BYTES):
        end = stored.base_offset + stored.record_count
        try:
            item = classify(stored.data, stored.base_offset, stored.record_count)
        except ValueError as error:  # not a batch this version wrote: never fired
            log.warning("%s@%d is not a timer batch: %s", replica.group, stored.base_offset, error)
            item = None
        items.append((item, end))
    return items


def _read_batch(replica: Replica, offset: int) -> bytes | None:
    """Reader thread: the stored bytes of the timer batch at `offset` (None: gone)."""
    for stored in replica.read_committed(offset, 1, READ_BYTES):
        if stored.base_offset == offset:
            return bytes(stored.data)
    return None


class Follower:
    """Folds one replica's committed timer log (every replica of a timer partition)."""

    def __init__(self, replica: Replica, config: TimerConfig) -> None:
        self.replica = replica
        self.fold = LogFold(config.bucket_ms)
        self.folded = asyncio.Event()  # set (and replaced) after each fold step
        self.on_item: Callable[[TimerBatch | Plan], None] | None = None  # the slot's
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        self._task.cancel()

    async def caught_up(self, offset: int) -> None:
        while self.fold.applied_offset < offset:
            await self.folded.wait()

    async def _run(self) -> None:
        replica = self.replica
        try:
            self.fold.applied_offset = replica.segmented.first_offset
            while True:
                changed = replica.hw_changed
                if self.fold.applied_offset < replica.high_watermark:
                    items = await asyncio.to_thread(_read_items, replica, self.fold.applied_offset)
                    for item, end in items:
                        self.fold.apply(item, end)
                        if item is not None and self.on_item is not None:
                            self.on_item(item)
                    event, self.folded = self.folded, asyncio.Event()
                    event.set()
                    if items:
                        continue
                await changed.wait()
        except (asyncio.CancelledError, LogClosed, NodeFailStopped):
            return
        except Exception:
            log.exception("following the timer log %s failed", replica.group)


class Slot:
    """Fires the timers of one timer partition this node leads, in one term."""

    def __init__(
        self,
        follower: Follower,
        source: TopicSpec,
        host: TimerHost,
    ) -> None:
        self.follower = follower
        self.replica = follower.replica
        self.term = self.replica.node.term
        self.source = source
        self.host = host
        self.book: TimerBook | None = None
        self._wake = asyncio.Event()
        self._producer_id = fire_producer_id(source.uid, self.replica.partition)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def leads(self) -> bool:
        replica = self.host.replica(self.replica.group)
        return (
            replica is self.replica
            and replica.node.role is Role.LEADER
            and replica.node.term == self.term
        )

    def close(self) -> None:
        self.follower.on_item = None
        self._task.cancel()

    def _on_item(self, item: TimerBatch | Plan) -> None:
        book = self.book
        if book is None:
            return
        if isinstance(item, TimerBatch):
            book.accepted(item)
            due = book.next_due_ms()
            if due is not None and due <= item.due_ms:
                self._wake.set()
        else:
            book.planned(item)

    async def _run(self) -> None:
        group = self.replica.group
        try:
            book = await self._load()
            if book is None:
                return
            plan = book.last_plan
            if plan is not None:  # its outcome is unknown: appended again (duplicates)
                await self._fire(plan)
            await self._serve(book)
        except (asyncio.CancelledError, LogClosed, NodeFailStopped, Deposed):
            return
        except Exception:
            log.exception("firing the timers of %s failed", group)

    async def _load(self) -> TimerBook | None:
        replica = self.replica
        target = replica.node.log.last_index  # every entry up to here commits with our no-op
        while replica.node.applied_index < target:
            if not self.leads():
                return None
            changed = replica.hw_changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.host.tick_s)
        await self.follower.caught_up(replica.high_watermark)
        fold = self.follower.fold
        book = TimerBook(self.host.config, faults=self.host.faults)
        book.restore(fold.summary(), fold.last_plan)
        self._load_buckets(book)
        self.book = book
        self.follower.on_item = self._on_item
        log.info(
            "firing the timers of %s (into %s/%d): term=%d pending=%d", replica.group,
            self.source.name, replica.partition, self.term, book.pending,
        )  # fmt: skip
        return book

    def _load_buckets(self, book: TimerBook) -> None:
        for bucket in book.buckets_to_load(_now_ms()):
            book.load_bucket(bucket, self.follower.fold.bucket(bucket))

    async def _serve(self, book: TimerBook) -> None:
        while self.leads():
            now = _now_ms()
            self._load_buckets(book)
            plan = book.next_plan(now)
            if plan is None:
                due = book.next_due_ms()
                # wake at the due time, or at the next bucket boundary to load the window
                boundary = (now // self.host.config.bucket_ms + 1) * self.host.config.bucket_ms
                wait_ms = min(due if due is not None else boundary, boundary) - now
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(wait_ms, 0) / 1000 + 0.0005)
                continue
            if not await self._append_plan(plan):
                return
            book.planned(plan)
            await self._fire(plan)

    async def _append_plan(self, plan: Plan) -> bool:
        now_ms = _now_ms()
        waiter = Waiter(asyncio.get_running_loop().create_future())
        self.host.propose(Proposal(self.replica, plan_batch(plan, now_ms), 1, now_ms, waiter))
        try:
            await asyncio.wait_for(waiter.future, self.host.write_timeout_s)
            return True
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception as error:  # NotLeader, ProposalDropped, NotCommitted, TimeoutError
            log.info("a plan of %s did not commit (%s): its successor decides again",
                     self.replica.group, error or type(error).__name__)  # fmt: skip
            return False

    async def _fire(self, plan: Plan) -> None:
        sequence = plan.sequence
        for batch in plan.batches:
            data = await asyncio.to_thread(_read_batch, self.replica, batch.offset)
            if data is None:
                log.error("timer batch %s@%d is gone from the log: not fired",
                          self.replica.group, batch.offset)  # fmt: skip
            else:
                await self._append(with_producer(data, self._producer_id, sequence))
            sequence += batch.record_count

    async def _append(self, batch: bytes) -> None:
        delay_s = RETRY_FIRST_S
        while True:
            try:
                await self.host.copies.copy(self.source.name, self.replica.partition, batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not self.leads():
                    raise Deposed(f"{self.replica.group}: leadership ended") from error
                log.warning("firing into %s/%d: %s; retrying in %.1f s", self.source.name,
                            self.replica.partition, error, delay_s)  # fmt: skip
                await asyncio.sleep(delay_s)
                delay_s = min(RETRY_MAX_S, delay_s * 2)


class TimerHost:
    """Followers for every timer partition this node holds, slots for those it leads."""

    def __init__(
        self,
        *,
        topics: Callable[[], Mapping[str, TopicSpec]],
        replicas: Callable[[], Mapping[str, Replica]],
        propose: Callable[[Proposal], None],
        copies: CopyProducer,
        tick_s: float,
        write_timeout_s: float,
        config: TimerConfig | None = None,
        faults: TimerFaults = NO_FAULTS,
    ) -> None:
        self._topics = topics
        self._replicas = replicas
        self.propose = propose
        self.copies = copies
        self.tick_s = tick_s
        self.write_timeout_s = write_timeout_s
        self.config = config or TimerConfig()
        self.faults = faults
        self.followers: dict[str, Follower] = {}
        self.slots: dict[str, Slot] = {}
        self._task: asyncio.Task[None] | None = None

    def replica(self, group: str) -> Replica | None:
        return self._replicas().get(group)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for slot in self.slots.values():
            slot.close()
        for follower in self.followers.values():
            follower.close()
        self.slots.clear()
        self.followers.clear()

    def pending(self, source: TopicSpec, partition: int) -> int | None:
        """Pending timers of a source partition, as this node's replica of its timer log folds
        them (None: this node holds none)."""
        follower = self.followers.get(f"{TIMER_TOPIC_PREFIX}{source.uid}/{partition}")
        return None if follower is None else follower.fold.pending

    def folds(self) -> dict[str, LogFold]:
        return {group: follower.fold for group, follower in self.followers.items()}

    async def _watch(self) -> None:
        while True:
            try:
                self._look()
            except Exception:
                log.exception("the timer host's look failed")
            await asyncio.sleep(LOOK_S)

    def _look(self) -> None:
        replicas = self._replicas()
        sources = {spec.uid: spec for spec in self._topics().values() if spec.uid}
        for group in [g for g, f in self.followers.items() if replicas.get(g) is not f.replica]:
            self.followers.pop(group).close()
        for group, slot in list(self.slots.items()):
            if not slot.leads() or self.followers.get(group) is not slot.follower:
                slot.close()
                del self.slots[group]
        for group, replica in replicas.items():
            if not replica.topic.startswith(TIMER_TOPIC_PREFIX):
                continue
            follower = self.followers.get(group)
            if follower is None:
                follower = self.followers[group] = Follower(replica, self.config)
            source = sources.get(replica.topic[len(TIMER_TOPIC_PREFIX) :])
            if source is not None and group not in self.slots and replica.node.role is Role.LEADER:
                self.slots[group] = Slot(follower, source, self)


FAULTS_ENV_VAR = "FLOTILLA_TIMER_FAULTS"


def timer_faults_from_env(environ: Mapping[str, str] | None = None) -> TimerFaults:
    """TEST-ONLY: the deliberate bugs `FLOTILLA_TIMER_FAULTS` names (`timers.faults`, comma
    separated; none when unset). Raises `ConfigError` naming an unknown one and the valid ones;
    logs a loud warning when any is armed."""
    text = (os.environ if environ is None else environ).get(FAULTS_ENV_VAR, "")
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        return NO_FAULTS
    for name in names:
        if name not in FAULT_NAMES:
            raise ConfigError(
                f"{FAULTS_ENV_VAR}: unknown fault {name!r}; valid: {', '.join(FAULT_NAMES)}"
            )
    log.warning(
        "TEST-ONLY FAULTS ARMED: %s=%s: this node's timers are deliberately broken; never run "
        "it for real data", FAULTS_ENV_VAR, ",".join(names),
    )  # fmt: skip
    return TimerFaults(**dict.fromkeys(names, True))


def _now_ms() -> int:
    return int(time.time() * 1000)
