"""The MultiRaft host: many Raft groups on one node, driven by one asyncio task.

(The driver's round below is one sequence whose steps share its inbox, its dirty set and the
ordering contract, so it stays one module; when groups tick and what a pause does to leases is
`cluster.host_ticks`, and the timer wheel's bookkeeping `cluster.tick_wheel`.)

The driver is the only caller of every `RaftNode`. Inputs (ticks, peer messages, proposals)
queue in an inbox; each round the driver:

1. steps the queued messages (at most MAX_ROUND_MESSAGES of them: the rest wait for the next
   round, and the loop serves its other callbacks between rounds), makes the queued
   proposals, ticks the active groups;
2. takes the Ready of every group that has one;
3. finishes at once the Readies with no disk work (they speak for state already durable):
   applies their committed ranges (high watermarks, produce waiters) first, then sends their
   messages, so the replies a commit releases go out ahead of this round's other work;
4. sends at once the messages a leader may send before its own fsync (Raft thesis §10.2.1);
5. does the disk work of *all* the other Readies in one storage-thread call, ending with one
   group commit (`sync_logs`: one fsync per dirty file however many groups wrote);
6. applies their committed ranges, sends their remaining messages — now backed by durable
   state, as the contract demands — and advances every node.

Storage errors (`cluster.failstop`): a failed write or fsync in step 5 stops the node on the
storage thread, before any message of the round leaves; the failed fsync is never retried, and
every future the node still holds (produce waiters, `maintain`, proposals queued) settles with
`NodeFailStopped`, so nothing (the partition manager above all) waits forever.

One group's unexpected error (in its step, tick, Ready, writes or apply) quarantines that group
alone (`cluster.quarantine`): every other group's inputs of the round are still handled.

Driven by hand: a host that is not `start()`ed runs no task and no ticker; a test (or a tool)
drives it with `run_round()` (one round, as the driver runs it), `tick(at)` (what the ticker
calls) and `save_commits_soon()` (the periodic save, now): the same code as the driver's, with
no private state touched.

Outgoing messages are encoded once, as pieces (an AppendRequest's entry data are pieces of
their own), and queued per destination node by the transport, which joins the messages of many
groups into one frame (heartbeats of many groups to one node thus travel together).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from cluster.clock import Ticker, ticker_or_loop
from cluster.failstop import FailStop, NodeFailStopped, disk_failure
from cluster.host_ticks import BEHIND_ROUNDS, HostTicks
from cluster.idempotence import OutOfOrderSequence
from cluster.persist import describe, has_disk_work, write_all
from cluster.proposals import Proposal, admit
from cluster.quarantine import Quarantine
from cluster.replica import (
    SNAPSHOT_EVERY_ENTRIES,
    NotCommitted,
    Replica,
    same_incarnation,
    save_commit_indexes,
)
from cluster.storage_thread import StorageThread
from cluster.tick_wheel import TickWheel
from raft.codec import decode_message, encode_message_parts, is_heartbeat
from raft.config import RaftConfig
from raft.errors import NotLeader, ProposalDropped, RaftError
from raft.ready import Ready
from raft.types import LogReset, Message, Role, VoteRequest
from storage import StateJournal
from timers.types import TIMER_TOPIC_PREFIX

__all__ = ["MultiRaft", "Proposal"]

log = logging.getLogger("flotilla.multiraft")

DEFAULT_ELECTION_TICKS = RaftConfig().election_ticks

# Raft messages one round steps at most (~30 us each with their Ready and sends: a round of them
# keeps the loop ~60 ms). A flood (thousands of groups electing at once, a backlog after a
# pause) once made single rounds of tens of seconds: no tick, no SWIM answer, so the node was
# declared dead by its peers and its replicas moved, which made more of the same.
MAX_ROUND_MESSAGES = 2048
# Frames waiting for the driver from which it counts as behind its inbox: a heartbeat delivered
# then makes an earlier one of the same group from the same sender, still waiting, void
# (`deliver`).
BEHIND_FRAMES = 8
# Vote requests of its own accord within a second from which a member counts as still opening
# or electing many replicas (`campaigned_at`: leader balancing waits for it).
BUSY_CAMPAIGNS = 16
_VOID = ("", b"")  # a message made void in its frame: skipped when the frame is stepped

Send = Callable[[str, str, list[bytes]], None]  # (to node, group, payload pieces)


@dataclass(frozen=True, slots=True)
class _Call:
    action: Callable[[], object]
    replica: Replica | None  # the one group the action touches; None: any


class MultiRaft(HostTicks):
    def __init__(
        self,
        node_id: str,
        send: Send,
        tick_s: float,
        journal: StateJournal,
        quiesce_after_ticks: int = 20,
        fail_stop: FailStop | None = None,
        ticker: Ticker | None = None,
        election_ticks: int = DEFAULT_ELECTION_TICKS,
    ) -> None:
        """`ticker` paces the ticks (default: a `LoopTicker` of `tick_s`; a test passes a
        `FakeTicker`); its interval must be `tick_s`. `election_ticks`: the groups' election
        timeout (how long lease reads wait after ticks were dropped, `ticks_stalled`)."""
        self.ticker = ticker_or_loop(ticker, tick_s)
        self.node_id = node_id
        self.fail_stop = fail_stop or FailStop()
        self.quarantine = Quarantine()
        self.journal = journal
        self.quiesce_after_ticks = quiesce_after_ticks
        self.send = send
        self.tick_s = tick_s
        self.replicas: dict[str, Replica] = {}
        # the groups whose logs a clean stop closed, each flushed (None: not stopped cleanly)
        self.closed_cleanly: list[str] | None = None
        # moves each time a replica is removed (the partition manager compares it: a replica
        # added was known to it already, queued)
        self.removed_version = 0
        # moves only when a timer partition's replica (`__timers.*`) is added or removed: the
        # timer host rescans `replicas` for them only then, not at each of the thousands of
        # replicas a topic's creation or a restart opens
        self.timer_groups_version = 0
        # a message for a group not hosted here: (group, incarnation tag, sender, payload); the
        # callee may open the group and deliver the message again
        self.unknown_group: Callable[[str, str, str, bytes | memoryview], None] = lambda *message: (
            None
        )
        # after a round, with the groups whose role may have changed since the last call
        self.on_round: Callable[[set[Replica]], None] = lambda touched: None
        # with a replica just quarantined (already removed from the rounds)
        self.on_quarantine: Callable[[Replica], None] = lambda replica: None
        # after each round that did disk work, with how long it took (writes and group commit)
        self.on_disk: Callable[[float], None] = lambda seconds: None
        # each group commit's fsync time; called on the storage thread
        self.on_fsync: Callable[[float], object] = lambda seconds: None
        # when a round has taken every input delivered so far (the transport's inbox budget)
        self.on_inputs_taken: Callable[[], None] = lambda: None
        self._inbox: deque[tuple[str, list[tuple[str, bytes | memoryview]]] | Proposal | _Call] = (
            deque()
        )
        self._ticks_due = 0
        self.election_ticks = election_ticks
        # lease reads wait until then, on the ticker's clock (ticks were dropped: `_tick_all`)
        self._dropped_until_s = 0.0
        self._commits_saved_at = 0.0  # on the ticker's clock
        self._last_tick_at = 0.0  # on the ticker's clock
        self.leases_voided = 0  # times a pause voided every leader's lease
        self.wheel = TickWheel()  # the active groups, and which a tick must touch
        self._dirty: set[Replica] = set()
        self._touched: set[Replica] = set()  # ticked, stepped or called since `on_round`
        # replicas whose applied index may have passed the commit index the journal holds (a
        # Ready applied since): the lazy save looks at these, not at every hosted replica
        self._commit_moved: set[Replica] = set()
        self._wake = asyncio.Event()
        self._storage = StorageThread("flotilla-storage")
        self._maintenance: list[tuple[Callable[[], object], asyncio.Future[object]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.rounds = 0
        self.rounds_cut_short = 0  # rounds that left inputs for the next (MAX_ROUND_MESSAGES)
        self._cut_short_round = -BEHIND_ROUNDS  # the last round that left inputs for the next
        self.malformed_messages = 0
        self.foreign_messages = 0  # for another incarnation of the topic (see `_step_all`)
        # member -> when this node last stepped vote requests of its own accord from it (pre-
        # votes and votes not started by a leader's transfer: replicas there asking who leads,
        # or campaigning) at `BUSY_CAMPAIGNS` or more within a second, on the ticker's clock:
        # leader balancing waits while a member still does (a node back from a restart asks
        # as each of its replicas opens, hundreds a second: `cluster.steward`); one replica
        # that keeps asking (cut off from its leader) does not hold a member's balancing
        self.campaigned_at: dict[str, float] = {}
        self._campaigns: dict[str, tuple[float, int]] = {}  # member -> (second began, count)
        # hosted replicas that lead their group, and that know its leader (a leader counts
        # itself): kept as rounds end (`_count`), so Health reads them without a walk of every
        # replica (60,000 on a node: tens of ms of its loop, at every poll)
        self.leading = 0
        self.led = 0
        # (sender, group) -> where its latest heartbeat waits in the inbox, while behind it
        self._waiting_heartbeats: dict[
            tuple[str, str], tuple[list[tuple[str, bytes | memoryview]], int]
        ] = {}

    # -- registry -------------------------------------------------------------------------------
    def add(self, replica: Replica) -> None:
        self.replicas[replica.group] = replica
        self._count(replica)
        if replica.topic.startswith(TIMER_TOPIC_PREFIX):
            self.timer_groups_version += 1
        self._commit_moved.add(replica)
        self.wheel.activate(replica)
        self._dirty.add(replica)
        self._wake.set()

    def remove(self, group: str) -> Replica | None:
        replica = self.replicas.pop(group, None)
        if replica is not None:
            self.leading -= replica.counted >> 1
            self.led -= replica.counted & 1
            replica.counted = 0
            self.removed_version += 1
            if replica.topic.startswith(TIMER_TOPIC_PREFIX):
                self.timer_groups_version += 1
            self._commit_moved.discard(replica)
            self.wheel.active.discard(replica)
            self._dirty.discard(replica)
            self._touched.discard(replica)
        return replica

    def wake(self, group: str) -> None:
        replica = self.replicas.get(group)
        if replica is not None:
            replica.node.wake()
            self.wheel.activate(replica)
            self._wake.set()

    @property
    def active_count(self) -> int:
        return len(self.wheel.active)

    # -- inputs (event loop) -----------------------------------------------------------------
    def deliver(self, sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        """Queues a frame's messages for the driver. Behind its inbox (`BEHIND_FRAMES` frames
        waiting), a heartbeat makes the one of the same group from the same sender still
        waiting void: as if the network had lost it, which Raft allows, and the newer says all
        the older did (term, commit, the lease tick to echo). A node restarted with 60,000
        replicas fell tens of MB behind, most of it heartbeats its peers' awake groups sent it
        every interval, and every answer it owed waited behind them."""
        inbox = self._inbox
        if len(inbox) >= BEHIND_FRAMES:
            waiting = self._waiting_heartbeats
            for position, (group, payload) in enumerate(messages):
                if is_heartbeat(payload):
                    key = (sender, group)
                    earlier = waiting.get(key)
                    if earlier is not None:
                        frame, at = earlier
                        frame[at] = _VOID
                    waiting[key] = (messages, position)
        inbox.append((sender, messages))
        self._wake.set()

    def propose(self, proposal: Proposal) -> None:
        failure = self.fail_stop.failure
        if failure is not None:
            _settle(proposal.waiter.future, failure)
            return
        self._inbox.append(proposal)
        self._wake.set()

    def call(self, action: Callable[[], object], replica: Replica | None = None) -> None:
        """Runs `action` in the driver, between rounds (e.g. a leadership transfer): the only
        safe place to touch a Raft node from outside the driver. `replica`: the only group the
        action touches (None: any group may have changed, so every group is checked for a
        Ready — O(groups))."""
        self._inbox.append(_Call(action, replica))
        self._wake.set()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.ticker.start(self.tick)
        self._commits_saved_at = self._last_tick_at = self.ticker.started_at
        self._tasks = [loop.create_task(self._driver())]

    async def stop(self) -> None:
        try:
            await self.ticker.stop()
        except Exception:
            pass
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if not self.fail_stop.stopped:  # else closing would fsync again: never retry one
            await self._storage.run(self.fail_stop.guard, "closing the logs", self._close_all)
        self._storage.shutdown(wait=True)

    def _close_all(self) -> None:
        try:  # a graceful stop keeps every replica's high watermark for the restart
            save_commit_indexes(list(self.replicas.values()), self.journal, lambda r: True)
        except OSError as error:
            log.error("commit indexes not saved at close: %s", error)
        closed = []
        for replica in list(self.replicas.values()):
            replica.close()
            if replica.segmented.failed is None:  # else closed without a flush
                closed.append(replica.group)
        self.journal.close()
        self.closed_cleanly = closed

    def maintain(self, work: Callable[[], object]) -> asyncio.Future[object]:
        """Runs `work` on the storage thread within the next round, while no Raft node steps
        (e.g. compacting logs, which the nodes read between rounds); the future has its
        result or exception."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        failure = self.fail_stop.failure
        if failure is not None:
            future.set_exception(failure)
            return future
        self._maintenance.append((work, future))
        self._wake.set()
        return future

    async def run_storage(self, work: Callable[[], object], what: str = "") -> object:
        """Runs `work` on the storage thread (e.g. deleting a replica's files). A storage
        failure in it stops the node (`cluster.failstop`); `what` names the work for the log."""
        failure = self.fail_stop.failure
        if failure is not None:
            raise failure
        guarded = partial(self.fail_stop.guard, what or describe(work), work)
        return await self._storage.run(guarded)

    def save_commits_soon(self) -> asyncio.Future[object] | None:
        """Saves, within the next round, the commit indexes that moved (`save_commit_indexes`):
        lazily, off the event loop, one journal write for all of them. The future of the save,
        or None when no commit index moved (nothing to write)."""
        moved = [r for r in self._commit_moved if r.node.applied_index > r.saved_commit]
        # kept until a save is seen to have covered them (one that failed is tried again)
        self._commit_moved = set(moved)
        if not moved:
            return None
        hosted = lambda replica: self.replicas.get(replica.group) is replica  # noqa: E731
        future = self.maintain(lambda: save_commit_indexes(moved, self.journal, hosted))
        future.add_done_callback(_log_failure)
        return future

    async def _driver(self) -> None:
        while not self.fail_stop.stopped:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.run_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("multiraft round failed")
            # the loop's other callbacks (the ticker, SWIM, clients, frames arriving) run
            # between rounds: an event already set would not yield, and a flood of inputs
            # would chain round after round with nothing else served
            await asyncio.sleep(0)

    # -- one round ----------------------------------------------------------------------------
    def _take_inputs(self) -> None:
        """Steps the inputs queued before the round, at most MAX_ROUND_MESSAGES Raft messages
        of them (a proposal or a call counts one); the rest wait, first in line, for the next
        round. The inbox's byte budget (`on_inputs_taken`) is handed back only once the inbox
        is empty: frames beyond it meanwhile are dropped (Raft resends), not queued."""
        inbox, self._inbox = self._inbox, deque()
        taken = 0
        try:
            while inbox and taken < MAX_ROUND_MESSAGES:
                item = inbox.popleft()
                if isinstance(item, tuple):  # a frame's messages: a big one is split
                    sender, messages = item
                    room = MAX_ROUND_MESSAGES - taken
                    if len(messages) > room:
                        inbox.appendleft((sender, messages[room:]))
                        messages = messages[:room]
                    taken += len(messages)
                    self._step_all(sender, messages)
                else:
                    taken += 1
                    self._take(item)
        finally:  # left over, or a fail-stop's: what was not taken stays (`_halt` settles it)
            if inbox:
                inbox.extend(self._inbox)
                self._inbox = inbox
        if inbox:  # behind: the groups' clocks wait with their messages (`_tick_all`)
            self.rounds_cut_short += 1
            self._cut_short_round = self.rounds
            self._wake.set()
            return
        self._waiting_heartbeats.clear()  # every frame taken: no heartbeat waits any more
        self.on_inputs_taken()
        self._tick_all()

    def _take(
        self, item: tuple[str, list[tuple[str, bytes | memoryview]]] | Proposal | _Call
    ) -> None:
        if isinstance(item, Proposal):
            self._make_proposal(item)
        elif isinstance(item, _Call):
            hosted = item.replica is None or self.replicas.get(item.replica.group) is item.replica
            if not hosted:
                return  # removed since the call was queued (retired, topic deleted)
            touched = list(self.wheel.active) if item.replica is None else [item.replica]
            for replica in touched:
                self.wheel.catch_up(replica)
            try:
                item.action()
            except Exception:
                log.exception("a driver call failed")
            if item.replica is None:
                self._dirty.update(self.replicas.values())
                for replica in touched:
                    if replica in self.wheel.active:
                        self.wheel.schedule(replica)
            else:
                self._dirty.add(item.replica)
                if not item.replica.node.quiesced:
                    self.wheel.activate(item.replica)
        else:
            self._step_all(*item)

    def _step_all(self, sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        wheel, replicas, dirty = self.wheel, self.replicas, self._dirty
        active = wheel.active
        for wire_group, payload in messages:
            if not wire_group:
                continue  # made void while it waited (`deliver`)
            group, _, tag = wire_group.partition("@")
            replica = replicas.get(group)
            if replica is None:
                if group not in self.quarantine:  # a quarantined replica hears nothing
                    self.unknown_group(group, tag, sender, payload)
                continue
            # (named exactly as this replica names itself: the same incarnation, or both untagged)
            if wire_group != replica.wire_group and not same_incarnation(tag, replica.topic_uid):
                # another incarnation of the topic (deleted and created again) on one side,
                # not yet seen by the other: its log must not mix with this one's
                self.foreign_messages += 1
                continue
            try:
                message = decode_message(payload)
            except (ValueError, TypeError, RaftError) as error:
                self.malformed_messages += 1
                log.warning(
                    "dropped a malformed raft message from %s for %s: %s", sender, group, error
                )
                continue
            if message.sender != sender:
                self.malformed_messages += 1
                log.warning(
                    "dropped a raft message claiming sender %s on %s's stream",
                    message.sender,
                    sender,
                )
                continue
            if type(message) is VoteRequest and not message.transfer:
                self._count_campaign(sender)
            try:
                if replica.ticks_given != wheel.count and replica in active:
                    wheel.catch_up(replica)
                replica.node.step(message)
            except Exception as error:
                self._isolate(replica, "stepping a message of", error)
                continue
            if replica.node.quiesced:
                active.discard(replica)
            else:
                wheel.activate(replica)
            dirty.add(replica)

    def _count_campaign(self, member: str) -> None:
        """A vote request of `member`'s own accord was stepped (see `campaigned_at`)."""
        now = self.ticker.now()
        began, count = self._campaigns.get(member, (now, 0))
        if now - began >= 1.0:
            began, count = now, 0
        count += 1
        self._campaigns[member] = (began, count)
        if count >= BUSY_CAMPAIGNS:
            self.campaigned_at[member] = now

    def _make_proposal(self, proposal: Proposal) -> None:
        replica, waiter = proposal.replica, proposal.waiter
        if waiter.future.done():
            return
        if self.replicas.get(replica.group) is not replica:  # quarantined, retired, deleted
            waiter.future.set_exception(
                NotCommitted(f"replica {replica.group} is not hosted", definitely_not_written=True)
            )
            return
        try:
            self.wheel.catch_up(replica)
            admit(proposal)
        except (NotLeader, ProposalDropped, OutOfOrderSequence) as error:
            waiter.future.set_exception(error)
            return
        except Exception as error:
            waiter.future.set_exception(
                NotCommitted(f"{replica.group} failed: {error}", definitely_not_written=True)
            )
            self._isolate(replica, "proposing to", error)
            return
        self.wheel.activate(replica)
        self._dirty.add(replica)

    async def run_round(self) -> None:
        """One round (the module docstring's steps 1-6), now. The driver task runs one each time
        an input wakes it, and logs an exception a round raises; a host driven by hand (not
        `start()`ed: never while the driver runs) calls it, and sees the exception."""
        try:
            if self.fail_stop.failure is not None:
                raise self.fail_stop.failure
            await self._run_round()
        except NodeFailStopped as failure:
            # the process has exited (unless the exit is injected): nothing more of this round
            # is sent, and everything pending ends with the failure
            self._halt(failure)

    async def _run_round(self) -> None:
        self.rounds += 1
        self._take_inputs()
        readies: list[tuple[Replica, Ready]] = []
        self._touched.update(self._dirty)
        dirty, self._dirty = self._dirty, set()
        for replica in dirty:
            try:
                if replica.node.has_ready():
                    readies.append((replica, replica.node.ready()))
            except Exception as error:
                self._isolate(replica, "taking the Ready of", error)
        maintenance, self._maintenance = self._maintenance, []
        if not readies and not maintenance:
            self._end_round()
            return
        # A Ready with no disk work speaks only for state earlier rounds made durable (e.g. a
        # commit learnt from followers' answers, a heartbeat's answer): it is finished at once,
        # its produce waiters settled before its messages are queued, so the replies are not
        # held behind this round's stream writes or fsyncs. A leader's appends go out before
        # its own disk work (thesis §10.2.1); every other message waits for the disk.
        heavy: list[tuple[Replica, Ready, bool]] = []  # (replica, ready, messages still due)
        for replica, ready in readies:
            try:
                if not has_disk_work(replica, ready):
                    self._finish(replica, ready, send=True)
                    continue
                if ready.send_before_persist:
                    self._send(replica, ready.messages)
            except Exception as error:
                self._isolate(replica, "finishing the Ready of", error)
                continue
            heavy.append((replica, ready, not ready.send_before_persist))
        if heavy or maintenance:
            started = time.perf_counter()
            try:
                outcomes, failed = await self._storage.run(
                    write_all,
                    [(r, ready) for r, ready, _ in heavy],
                    self.journal,
                    [work for work, _ in maintenance],
                    self.fail_stop,
                    self.on_fsync,
                )
            except BaseException:
                self._maintenance[:0] = maintenance  # settled by `_halt` (or the next round)
                raise
            for replica, problem in failed:
                self._isolate(replica, "writing the log of", problem)
            self.on_disk(time.perf_counter() - started)
            for (_, future), outcome in zip(maintenance, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
        for replica, ready, send_now in heavy:
            try:
                self._finish(replica, ready, send=send_now)
            except Exception as error:
                self._isolate(replica, "finishing the Ready of", error)
        if self._dirty:
            self._wake.set()
        self._end_round()

    def _finish(self, replica: Replica, ready: Ready, *, send: bool) -> None:
        """After a Ready's disk work: tells the node, applies what committed, settles waiters
        and (if still due) sends its messages."""
        if self.replicas.get(replica.group) is not replica:
            return  # removed while its disk work ran (deleted topic, retired replica)
        replica.note_appended(ready)
        if replica.entries_since_snapshot >= SNAPSHOT_EVERY_ENTRIES:
            snapshot = replica.producer_snapshot()  # here: no write of the replica is running
            if snapshot is not None:  # written after this round's writes, before the next's
                self._storage.submit(
                    self.fail_stop.guard,
                    f"saving the producer snapshot of {replica.group}",
                    partial(replica.save_snapshot, snapshot),
                )
        replica.node.advance(ready)
        if replica.node.applied_index > replica.saved_commit:
            self._commit_moved.add(replica)
        # settle the produce waiters before queueing the messages: their replies then go
        # out ahead of this round's stream writes (the order does not matter to Raft)
        replica.apply(ready.committed)
        replica.settle_durable(replica.node.durable_index)
        if send:
            self._send(replica, ready.messages)
        if replica.node.has_ready():
            self._dirty.add(replica)
        if replica.node.quiesced:
            self.wheel.active.discard(replica)
        elif replica not in self.wheel.active:  # (its timers did not move: `advance` moves none)
            self.wheel.activate(replica)

    def _isolate(self, replica: Replica, doing: str, error: Exception) -> None:
        """`replica` raised `error` while the driver was `doing` something to it: a disk
        failure stops the node; anything else quarantines this replica alone."""
        if disk_failure(error) is not None:
            raise self.fail_stop(f"{doing} {replica.group}", error) from error
        if self.replicas.get(replica.group) is not replica:
            return  # already gone (quarantined earlier in this round, retired, deleted)
        self.remove(replica.group)
        entry = self.quarantine.add(replica.group, doing, error, replica.topic_uid)
        replica.fail_all(f"{entry.reason}; the replica is quarantined; the outcome is unknown")
        self._storage.submit(self._close_quarantined, replica)
        self.on_quarantine(replica)

    def _close_quarantined(self, replica: Replica) -> None:
        """Storage thread: releases a quarantined replica's files (a failed fsync in its
        close stops the node, as any other)."""
        try:
            self.fail_stop.guard(f"closing the quarantined replica {replica.group}", replica.close)
        except NodeFailStopped:
            pass  # the process is exiting
        except Exception as error:
            log.warning("closing the quarantined replica %s failed: %s", replica.group, error)

    def _halt(self, failure: NodeFailStopped) -> None:
        """The node stopped (fail-stop): every future it still holds settles with `failure`,
        nothing is stepped or sent any more."""
        maintenance, self._maintenance = self._maintenance, []
        for _, future in maintenance:
            _settle(future, failure)
        inbox, self._inbox = self._inbox, deque()
        for item in inbox:
            if isinstance(item, Proposal):
                _settle(item.waiter.future, failure)
        for replica in self.replicas.values():
            replica.fail_all(f"{failure}; the outcome is unknown")
        self._wake.set()  # the driver sees the failure and ends

    def _end_round(self) -> None:
        if self._touched:
            touched, self._touched = self._touched, set()
            for replica in touched:  # removed ones left `_touched` when removed
                self._count(replica)
            self.on_round(touched)

    def _count(self, replica: Replica) -> None:
        """Brings `leading` and `led` up to date with the replica's role and leader."""
        node = replica.node
        counted = 0 if node.leader_id is None else 3 if node.role is Role.LEADER else 1
        if counted != replica.counted:
            self.leading += (counted >> 1) - (replica.counted >> 1)
            self.led += (counted & 1) - (replica.counted & 1)
            replica.counted = counted

    def _send(self, replica: Replica, messages: tuple[Message, ...]) -> None:
        send, group = self.send, replica.wire_group
        for message in messages:
            outgoing = message
            if type(message) is LogReset and not message.state:
                # the follower starts over at the log boundary: with the producer table as of
                # there, so it still knows who wrote before it (rare)
                boundary = message.boundary
                state = replica.boundary_state(boundary.index, boundary.term)
                outgoing = replace(message, state=state)
            send(outgoing.recipient, group, encode_message_parts(outgoing))


def _settle(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _log_failure(future: asyncio.Future[object]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("saving commit indexes failed: %s", future.exception())
