"""The timer host (DESIGN-26 "Firing, exactly once"): for each timer partition this node holds,
a follower folds the committed timer log (`cluster.timer_log.LogFold`); for each one it leads,
a slot fires the due timers into the source partition.

Follower (every replica): reads the committed batches past `applied_offset` in a thread (never
on the event loop; classifying a batch unpacks its first record only) into the replica's
on-disk `TimerIndex` (flushed at most every second, off the loop), waking the slot when a batch
is accepted.

Slot (the leader, one per term):
1. waits until every entry its log held when it was built is applied (its own term's no-op
   commits them), and the follower has folded them;
2. builds a `TimerBook` from the index (`restore` + the near window's buckets), then appends the
   book's `last_plan` again, with the batches it carries (`refire`: their outcome is unknown
   after a failover; each repeat is answered as a duplicate by the source partition) before
   anything new;
3. loops: sleeps until `PLAN_AHEAD_MS` before the earliest due time (an asyncio timer, not
   tick granularity) or until a batch due earlier is accepted; then `plan =
   book.next_plan(now + PLAN_AHEAD_MS + PLAN_SPAN_MS)`, appends the plan record (acks=all; it
   commits while the due time comes), `book.planned(plan)` once committed, then appends each
   planned batch,
   never before its due time (an asyncio timer at that instant), to source partition p, in
   order, unchanged but for its producer: `fire_producer_id(uid, p, plan.epoch)` at
   `plan.sequence` + the records before it (`with_producer`; a plan made more than
   `fire_renew_ms` after the last one starts a new epoch: the source forgets an idle producer),
   through the node's produce path (`cluster.copy_produce`: a refused sequence goes again under
   a producer derived from the pair). Two plans outstanding (`timers.types`): the next plan's
   record is appended while this plan's batches are being fired (it lists them again first,
   so a new leader still fires every batch whose outcome is unknown), and its batches are fired
   once this plan's appends all succeeded; a third plan only once this one fired in full. So
   under load the plan record's round trip is not on the due path of a plan's first batch (it
   was: the next plan was made only after the last append of the one before it succeeded). A
   failed append is retried (0.1 s doubling to 1 s) while the slot leads
   (`cluster.timer_fire`). Plans fired in full with no plan right behind them are followed by
   the book's done marker (an empty plan), so that no later leader fires them again once the
   source may have forgotten the fire producer.

Between plans, when nothing is due, the slot rolls the pending timers of segments older than
`timer_log_retention_ms` forward (`cluster.timer_roll`), so that long timers never pin the
timer log's disk. A slot whose leadership ended is dropped; its successor (on whichever node) fires the last plan
again. Timers of a source topic deleted (or recreated) are not fired: their timer log goes with
the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cluster.config import ConfigError
from cluster.controller import TopicSpec
from cluster.copy_produce import CopyProducer
from cluster.failstop import NodeFailStopped
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from cluster.timer_fire import Deposed, Firing, fire_producer_id
from cluster.timer_log import Follower, TimerItem, plan_batch
from cluster.timer_roll import Rolling
from raft.types import Role
from storage import LogClosed
from timers.book import TimerBook
from timers.faults import FAULT_NAMES, NO_FAULTS, TimerFaults
from timers.types import TIMER_TOPIC_PREFIX, Plan, Rolled, TimerBatch, TimerConfig

__all__ = ["FAULTS_ENV_VAR", "TimerHost", "fire_producer_id", "timer_faults_from_env"]

log = logging.getLogger("flotilla.timers")

# a plan is appended this long before its first batch is due (its record commits meanwhile)
PLAN_AHEAD_MS = 100
# and takes the batches due up to this long after that: a plan made while the last one is still
# being fired (two plans outstanding) is not one of a batch or two
PLAN_SPAN_MS = 100
LOOK_S = 0.1  # how often the host looks for timer partitions gained or lost
RETRY_S = 1.0  # a slot that failed is built again after this long


class Slot(Firing, Rolling):
    """Fires the timers of one timer partition this node leads, in one term."""

    host: TimerHost

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
        self._task = asyncio.get_running_loop().create_task(self._run())

    def leads(self) -> bool:
        replica = self.host.replica(self.replica.group)
        return (
            replica is self.replica
            and replica.node.role is Role.LEADER
            and replica.node.term == self.term
        )

    @property
    def done(self) -> bool:
        return self._task.done()

    def close(self) -> None:
        self.follower.on_item = None
        self._task.cancel()

    def _on_item(self, item: TimerItem) -> None:
        book = self.book
        if book is None:
            return
        if isinstance(item, TimerBatch):
            book.accepted(item)
            if book.next_due_ms() == item.due_ms:  # it is the earliest now: the wait shortens
                self._wake.set()
        elif isinstance(item, Plan):
            book.planned(item)
        elif isinstance(item, Rolled):
            book.rolled(item)  # (a floor concerns the index only)

    async def _run(self) -> None:
        group = self.replica.group
        try:
            book = await self._load()
            if book is None:
                return
            plan = book.refire()
            if plan is not None and plan.batches:  # outcome unknown: appended again (duplicates)
                await self._fire(plan)
                await self._mark_done(book)
            await self._serve(book)
        except (asyncio.CancelledError, LogClosed, NodeFailStopped, Deposed):
            return
        except Exception:
            log.exception("firing the timers of %s failed; again in %.0f s", group, RETRY_S)
            await asyncio.sleep(RETRY_S)  # then the host builds it again

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
        index = self.follower.index
        assert index is not None  # caught up: opened
        book = TimerBook(self.host.config, faults=self.host.faults)
        book.restore(index.summary(), index.last_plan)
        # folding goes on while the buckets are read (off the loop): from the summary on, the
        # book takes every item (one accepted into a bucket being read is held at once), or a
        # batch folded after the read's snapshot would be in the index and never in the book
        self.book = book
        self.follower.on_item = self._on_item
        await self._load_buckets(book)
        log.info(
            "firing the timers of %s (into %s/%d): term=%d pending=%d", replica.group,
            self.source.name, replica.partition, self.term, book.pending,
        )  # fmt: skip
        return book

    async def _load_buckets(self, book: TimerBook) -> None:
        """Reads the buckets the near window reaches into the book (off the event loop): all
        in one read of the index's journal, or, if that fails, one by one (a damaged bucket
        keeps only itself from loading)."""
        index = self.follower.index
        wanted = book.buckets_to_load(_now_ms())
        if not wanted:
            return
        try:
            if index is None:
                raise LogClosed("the timer index is not open")
            found = await asyncio.to_thread(index.buckets, wanted)
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception:
            found = {}
        for bucket in wanted:
            try:
                if bucket not in found:
                    if index is None:
                        raise LogClosed("the timer index is not open")
                    found[bucket] = await asyncio.to_thread(index.bucket, bucket)
            except (asyncio.CancelledError, NodeFailStopped):
                raise
            except Exception as error:  # asked for again at the next turn
                book.load_failed(bucket)
                log.warning("reading bucket %d of %s's timer index failed: %s", bucket,
                            self.replica.group, error)  # fmt: skip
                continue
            book.load_bucket(bucket, found[bucket])

    async def _serve(self, book: TimerBook) -> None:
        # the firings under way, in plan order: the next plan's record is appended while the
        # last plan's batches are fired (two plans outstanding, `timers.types`), never a third
        firing: list[asyncio.Task[None]] = []
        try:
            while self.leads():
                await self._load_buckets(book)
                if any(task.done() for task in firing):
                    for task in firing:
                        if task.done():
                            task.result()  # Deposed, a failure: the slot ends (the next refires)
                    firing = [task for task in firing if not task.done()]
                    if not firing and not await self._mark_done(book):
                        return
                    continue
                now = _now_ms()
                # made PLAN_AHEAD_MS before its first batch is due, so that its record has
                # committed by then; each append still waits for its batch's due time (`_fire`)
                plan = None
                due = book.next_due_ms()
                if len(firing) < 2 and due is not None and due <= now + PLAN_AHEAD_MS:
                    cutoff = now + PLAN_AHEAD_MS + PLAN_SPAN_MS
                    plan = book.next_plan(cutoff, carry=bool(firing))
                if plan is None and not firing and self.roll_due(book, now):  # firing first
                    if not await self._roll(book):
                        return
                    continue
                if plan is None:
                    # (a plan due but not made waits for a firing to end, not for its time)
                    blocked = due is not None and due <= now + PLAN_AHEAD_MS
                    await self._wait(book, now, firing, blocked=blocked)
                    continue
                own = plan.own_plan()  # (what it carries, the plan before it fires)
                read = self._read(own)  # while the plan record commits
                if not await self._append_plan(plan):
                    read.cancel()
                    return
                book.planned(plan)
                after = firing[-1] if firing else None
                firing.append(asyncio.get_running_loop().create_task(
                    self._fire_after(after, own, read)
                ))  # fmt: skip
        finally:
            for task in firing:
                task.cancel()
            for task in firing:
                with contextlib.suppress(BaseException):
                    await task

    async def _wait(
        self, book: TimerBook, now: int, firing: list[asyncio.Task[None]], *, blocked: bool
    ) -> None:
        """Until the next plan is to be made (PLAN_AHEAD_MS before the earliest due time; not
        when `blocked`: it is due, and waits for a firing under way), a batch due earlier is
        accepted, a firing under way ends, or the next bucket boundary (to load the window) or
        roll round comes."""
        due = None if blocked else book.next_due_ms()
        due = None if due is None else due - PLAN_AHEAD_MS
        boundary = (now // self.host.config.bucket_ms + 1) * self.host.config.bucket_ms
        wait_ms = min(due if due is not None else boundary, boundary) - now
        wait_ms = min(wait_ms, int(self.host.retention_check_s * 1000))
        self._wake.clear()
        woken = asyncio.ensure_future(self._wake.wait())
        waits: list[asyncio.Future[Any]] = [woken, *firing]
        try:
            await asyncio.wait(waits, timeout=max(wait_ms, 0) / 1000 + 0.0005,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            woken.cancel()

    async def _fire_after(
        self,
        previous: asyncio.Task[None] | None,
        plan: Plan,
        read: asyncio.Future[list[tuple[TimerBatch, bytes | None]]],
    ) -> None:
        """Fires `plan` once the plan before it fired in full (the fire producer's sequences
        land in order); a failure of that one is this one's too."""
        if previous is not None:
            await previous
        await self._fire(plan, read)

    async def _mark_done(self, book: TimerBook) -> bool:
        """Once a plan fired in full and no plan follows at once: the done marker (an empty
        plan), so that no later leader fires it again (`timers.types`)."""
        if book.next_plan(_now_ms() + PLAN_AHEAD_MS) is not None:
            return True  # the next plan marks it so by itself
        marker = book.done_marker()
        if marker is None:
            return True
        if not await self._append_plan(marker):
            return False
        book.planned(marker)
        return True

    async def _append_plan(self, plan: Plan) -> bool:
        """Appends a plan (or a done marker) decided in this slot's term, and only in it: the
        same node leading again in a later term has a new slot, whose plans this one's must
        not be appended beside (two books numbering the same fire sequences fire twice)."""
        if not self.leads():
            return False
        now_ms = _now_ms()
        waiter = Waiter(asyncio.get_running_loop().create_future())
        batch = plan_batch(plan, now_ms)
        self.host.propose(Proposal(self.replica, batch, 1, now_ms, waiter, term=self.term))
        try:
            await asyncio.wait_for(waiter.future, self.host.write_timeout_s)
            return True
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception as error:  # NotLeader, ProposalDropped, NotCommitted, TimeoutError
            log.info("a plan of %s did not commit (%s): its successor decides again",
                     self.replica.group, error or type(error).__name__)  # fmt: skip
            return False


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
        maintain: Callable[[Mapping[str, int]], Awaitable[int]] | None = None,
        retention_check_s: float = 5.0,
        timer_log_retention_ms: int = 3_600_000,
        hosted_version: Callable[[], object] = object,
    ) -> None:
        """`hosted_version`: a value that moves whenever a timer partition's replica is added
        or removed (`MultiRaft.timer_groups_version`); the timer partitions among `replicas`
        are looked for again only then (the default, a new object each call: at every look)."""
        self._topics = topics
        self._replicas = replicas
        self._hosted_version = hosted_version
        # the timer partitions hosted here, as of `_timer_groups_of` (a node may host 60,000
        # replicas: a look every LOOK_S must not walk them all)
        self._timer_groups: list[str] = []
        self._timer_groups_of: object = None
        self._propose = propose
        self.copies = copies
        self.tick_s = tick_s
        self.write_timeout_s = write_timeout_s
        self.config = config or TimerConfig()
        self.faults = faults
        self.maintain = maintain  # `cluster.retention.apply_timer_retention`
        self.retention_check_s = retention_check_s
        self.timer_log_retention_ms = timer_log_retention_ms  # `cluster.timer_roll`
        self.followers: dict[str, Follower] = {}
        self.slots: dict[str, Slot] = {}
        self._task: asyncio.Task[None] | None = None

    def replica(self, group: str) -> Replica | None:
        return self._replicas().get(group)

    def propose(self, proposal: Proposal) -> None:
        self._propose(proposal)

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
            await follower.shut()
        self.slots.clear()
        self.followers.clear()

    def pending(self, group: str) -> int | None:
        """Pending timers in the timer log partition `group` ("__timers.<uid>/<p>"), as this
        node's replica of it indexes them (None: this node holds none)."""
        follower = self.followers.get(group)
        return None if follower is None else follower.pending

    def gauges(self) -> dict[tuple[str, int], int]:
        """(source topic, partition) -> pending timers, of the timer logs this node leads (read
        on the metrics thread: copies only)."""
        return {
            (slot.source.name, slot.replica.partition): slot.follower.pending
            for slot in list(self.slots.values())
        }

    async def _watch(self) -> None:
        retained_at = time.monotonic()
        while True:
            try:
                self._look()
                if time.monotonic() - retained_at > self.retention_check_s:
                    retained_at = time.monotonic()
                    await self._retain()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the timer host's look failed")
            await asyncio.sleep(LOOK_S)

    async def _retain(self) -> None:
        """Drops the segments of each timer log below what its pending timers still need."""
        keep = {
            group: offset
            for group, follower in self.followers.items()
            if (offset := follower.keep_offset()) is not None
        }
        if self.maintain is not None:
            await self.maintain(keep)

    def _look(self) -> None:
        replicas = self._replicas()
        sources = {spec.uid: spec for spec in self._topics().values() if spec.uid}
        for group in [
            g for g, f in self.followers.items() if replicas.get(g) is not f.replica or f.done
        ]:
            self.followers.pop(group).close()
        for group, slot in list(self.slots.items()):
            # a slot that stopped (a plan that did not commit, a failure) is built again
            # while this node leads: it fires the last plan again first
            if slot.done or not slot.leads() or self.followers.get(group) is not slot.follower:
                slot.close()
                del self.slots[group]
        version = self._hosted_version()
        if version != self._timer_groups_of:
            self._timer_groups_of = version
            self._timer_groups = [
                g for g, r in replicas.items() if r.topic.startswith(TIMER_TOPIC_PREFIX)
            ]
        for group in self._timer_groups:
            replica = replicas.get(group)
            if replica is None:
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
