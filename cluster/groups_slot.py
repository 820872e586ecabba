"""One `__groups` partition this node leads, in one term: its `consumers.Coordinator`, loaded from
the partition's log and then serving requests one at a time (`cluster.groups` says when one is
built and dropped).

1. **Loading.** Waits until the replica has applied every entry its log held when the slot was
   built (the leader's own no-op commits them all), replays the committed records off the event
   loop (`cluster.groups_log.replay`), brings the node's topic table up to date (a table a poll
   behind would lack a topic the last coordinator assigned, and revoke its partitions), then
   `start`s the coordinator: every loaded member's session starts now, so a failover alone moves
   no partition. Until then the host answers `CoordinatorLoading`.
2. **Serving.** One task runs the calls one after another, with the ticks that came meanwhile:
   each call runs the core (which applies its decision to its state at once and returns the
   entries recording it); the entries of the calls one round took go out as record batches
   (acks=all) through the normal propose path, and every call of the round is answered only once
   they committed. So a call, and a read (describe, offsets, list), only ever sees state that is
   committed, or its own. A round that decided nothing writes nothing (an idle group costs no
   Raft write); its answers wait for the replica's Raft lease instead
   (`RaftNode.lease_read_index`), so a leader cut off from the others, which a new coordinator
   may already have overtaken, answers no stale assignment or offset. (The lease counts ticks,
   which do not pass while the process is paused: so after a pause, e.g. SIGSTOP, the host
   answers nothing until the node would have heard of a new leader, `GroupHost.paused`.)
3. **Dropping** (`drop`): calls not taken yet get the error given (`NotCoordinator` when
   leadership moved); calls whose write was in flight get `CoordinatorUnavailable` (the outcome
   is unknown). A failed append (not leader, dropped, timed out) drops the slot, whose state may
   hold entries that never commit: the host rebuilds it from the log if it still leads. An entry
   the core cannot read (`UnknownEntry`: a newer node wrote it) drops it for good this term.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cluster.coordinator_faults import NodeFaults
from cluster.dead_letters import DeadLetterCopier, DeadLetterSink
from cluster.errors import ClusterError
from cluster.failstop import NodeFailStopped
from cluster.groups_log import Entry, batches, replay
from cluster.multiraft import Proposal
from cluster.replica import Replica, Waiter
from consumers import Coordinator, CoordinatorConfig, GroupError, Outcome, TopicMeta
from consumers.coordinator import UnknownEntry
from consumers.queue_types import DeadLetterJob
from raft.types import Role
from storage import LogClosed

__all__ = [
    "CoordinatorLoading",
    "CoordinatorUnavailable",
    "Failure",
    "NotCoordinator",
    "Op",
    "PartitionCoordinator",
    "Shell",
]

log = logging.getLogger("flotilla.groups")

# Calls one round takes at most: their entries go out together (one Raft write, usually).
MAX_CALLS_PER_ROUND = 64
# How long an answer that wrote nothing waits for the Raft lease that confirms leadership.
LEASE_WAIT_S = 1.0

# A request to a coordinator: run with the topics' metadata; returns an `Outcome` (entries to
# append; its reply is sent once they commit) or a plain value (a read); raises GroupError.
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
    partition's groups now; a retry may succeed (perhaps elsewhere)."""


class Failure(Enum):
    """Why a slot dropped itself, for the host's rebuild policy."""

    MOVED = "moved"  # leadership or the replica changed: rebuild if this node leads again
    WRITE = "write"  # an append failed: rebuild from the log
    CORE = "core"  # the core raised: rebuild, a bounded number of times this term
    UNREADABLE = "unreadable"  # an entry of a newer format: no rebuild this term


@dataclass(frozen=True, slots=True)
class Shell:
    """What a partition's coordinator needs of the node."""

    node_id: str
    config: CoordinatorConfig
    replica: Callable[[str], Replica | None]  # the hosted replica of a group, now
    propose: Callable[[Proposal], None]
    wake: Callable[[str], None]  # un-quiesces a Raft group
    raft_tick_s: float
    write_timeout_s: float
    topic_meta: Callable[[], Mapping[str, TopicMeta]]
    refresh_topics: Callable[[], Awaitable[None]]
    paused: Callable[[], bool] = lambda: False  # a lease may be stale: the process was paused
    dead_letters: DeadLetterSink | None = None  # None: no dead letter is copied (tests)
    # TEST-ONLY (`cluster.coordinator_faults`)
    faults: NodeFaults = field(default_factory=NodeFaults)


@dataclass(slots=True, eq=False)
class _Call:
    group: str
    op: Op
    future: asyncio.Future[Any]


class PartitionCoordinator:
    def __init__(
        self,
        partition: int,
        replica: Replica,
        shell: Shell,
        on_dropped: Callable[[PartitionCoordinator, Failure], None],
    ) -> None:
        self.partition = partition
        self.replica = replica
        self.term = replica.node.term
        self.shell = shell
        self.on_dropped = on_dropped
        self.coordinator: Coordinator | None = None  # None while loading
        self.dropped = False
        self._calls: deque[_Call] = deque()
        self._in_flight: list[_Call] = []
        self._ticks_due = 0
        self._wake = asyncio.Event()
        self.copier = (
            None
            if shell.dead_letters is None
            else DeadLetterCopier(
                replica.group, shell.dead_letters, self._confirm_dead_letters, shell.faults
            )
        )
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def task(self) -> asyncio.Task[None]:
        return self._task

    def leads(self) -> bool:
        """Does this node still lead the partition, with this replica, in this slot's term?"""
        replica = self.shell.replica(self.replica.group)
        return (
            replica is self.replica
            and replica.node.role is Role.LEADER
            and replica.node.term == self.term
        )

    def submit(self, group: str, op: Op) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls.append(_Call(group, op, future))
        self._wake.set()
        return future

    def tick(self) -> None:
        if self.coordinator is not None:
            self._ticks_due += 1
            self._wake.set()

    def drop(
        self,
        error: ClusterError,
        failure: Failure = Failure.MOVED,
        unknown: ClusterError | None = None,
    ) -> None:
        """Stops the slot: calls not taken yet get `error`; calls whose write is in flight get
        `unknown` (by default: leadership changed, their outcome is unknown). Once."""
        if self.dropped:
            return
        self.dropped = True
        unknown = unknown or CoordinatorUnavailable(
            f"leadership of {self.replica.group} changed before the write committed; the "
            "outcome is unknown: retry"
        )
        for call in self._in_flight:
            _fail(call.future, unknown)
        for call in self._calls:
            _fail(call.future, error)
        self._in_flight.clear()
        self._calls.clear()
        if self._task is not asyncio.current_task():
            self._task.cancel()
        if self.copier is not None:
            self.copier.cancel()
        self.on_dropped(self, failure)
        self.coordinator = None

    # -- the task -------------------------------------------------------------------------------
    async def _run(self) -> None:
        group = self.replica.group
        try:
            coordinator = await self._load()
            if coordinator is None:
                return
            self.coordinator = coordinator
            await self._serve(coordinator)
        except asyncio.CancelledError:
            raise
        except NodeFailStopped:
            self.drop(CoordinatorUnavailable("the node is stopping on a storage failure"))
        except UnknownEntry as error:
            log.error("cannot serve the groups of %s: %s", group, error)
            self.drop(
                CoordinatorUnavailable(
                    f"node {self.shell.node_id} cannot read the group state of {group} "
                    f"({error}): a newer version wrote it"
                ),
                Failure.UNREADABLE,
            )
        except LogClosed:
            self.drop(NotCoordinator(f"{group} closed while loading", None))
        except Exception as error:
            log.exception("the coordinator of %s failed", group)
            self.drop(
                CoordinatorUnavailable(
                    f"the coordinator of {group} failed ({type(error).__name__}: {error}); retry"
                ),
                Failure.CORE,
            )

    async def _load(self) -> Coordinator | None:
        replica, shell = self.replica, self.shell
        started = time.monotonic()
        target = replica.node.log.last_index  # every entry up to here commits with our no-op
        while replica.node.applied_index < target:
            if not self.leads():
                return None  # the host drops the slot at its next look
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(replica.hw_changed.wait(), shell.raft_tick_s)
        coordinator, records = await asyncio.to_thread(
            replay, replica, shell.config, shell.faults.coordinator
        )
        try:
            await shell.refresh_topics()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # serve with the table as it is; it is polled again soon
            log.warning("refreshing the topics before serving %s failed: %s", replica.group, error)
        if not self.leads():
            return None
        coordinator.start()
        log.info("coordinating the groups of %s: term=%d records=%d load_ms=%d", replica.group,
                 self.term, records, int((time.monotonic() - started) * 1000))  # fmt: skip
        return coordinator

    async def _serve(self, coordinator: Coordinator) -> None:
        while True:
            if not self._calls and not self._ticks_due:
                self._wake.clear()
                await self._wake.wait()
            if not self.leads():
                return  # the host drops the slot at its next look
            ticks, self._ticks_due = self._ticks_due, 0
            taken: list[_Call] = []
            while self._calls and len(taken) < MAX_CALLS_PER_ROUND:
                call = self._calls.popleft()
                if not call.future.done():  # a caller that gave up is not served
                    taken.append(call)
            self._in_flight = taken
            topics = self.shell.topic_meta()
            entries: list[Entry] = []
            for _ in range(ticks):
                now_ms = int(time.time() * 1000)
                entries.extend((None, entry) for entry in coordinator.tick(now_ms))
            answers: list[tuple[_Call, Any, GroupError | None]] = []
            for call in taken:
                try:
                    outcome = call.op(coordinator, topics)
                except GroupError as error:  # refused: nothing changed
                    answers.append((call, None, error))
                    continue
                if isinstance(outcome, Outcome):
                    entries.extend((call.group, entry) for entry in outcome.entries)
                    outcome = outcome.reply
                answers.append((call, outcome, None))
            if entries:
                if not await self._append(entries):
                    return
            elif taken and not await self._confirm_lease():
                self._in_flight = []
                for call in taken:
                    _fail(call.future, CoordinatorUnavailable(
                        f"node {self.shell.node_id} cannot confirm that it still leads "
                        f"{self.replica.group} (no quorum heard lately); retry"
                    ))  # fmt: skip
                continue
            self._in_flight = []
            for call, reply, refusal in answers:
                if refusal is not None:
                    _fail(call.future, refusal)
                elif not call.future.done():
                    call.future.set_result(reply)
            self._offer_dead_letters(coordinator)

    def _offer_dead_letters(self, coordinator: Coordinator) -> None:
        """Between rounds: every decision the state holds has committed."""
        if self.copier is None:
            return
        jobs = coordinator.queue_dead_letter_jobs()
        if jobs:
            self.copier.offer(jobs)

    async def _confirm_dead_letters(
        self, copied: Sequence[DeadLetterJob], gone: Sequence[DeadLetterJob]
    ) -> None:
        """Reports copies, and records gone before their copy, to the core (entries, through
        a round); raises if the slot drops."""
        jobs = [*copied, *gone]
        if not jobs:
            return

        def confirm(coordinator: Coordinator, topics: Mapping[str, TopicMeta]) -> Any:
            entries = []
            if copied:
                entries += coordinator.queue_dead_lettered(list(copied)).entries
            if gone:
                entries += coordinator.queue_dead_letter_gone(list(gone)).entries
            return Outcome(None, entries)

        await self.submit(jobs[0].group, confirm)

    async def _confirm_lease(self) -> bool:
        """Does this node still lead the partition by its Raft lease (no other leader can have
        been elected meanwhile)? A quiesced leader is woken to renew it."""
        replica = self.replica
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEASE_WAIT_S
        replica.idle_ticks = 0  # members still ask: keep the lease fresh, do not quiesce yet
        while self.leads():
            if self.shell.paused():
                return False
            if replica.node.lease_read_index() is not None:
                return True
            if loop.time() >= deadline:
                break
            replica.idle_ticks = 0
            if replica.node.quiesced:
                self.shell.wake(replica.group)
            await asyncio.sleep(self.shell.raft_tick_s)
        return False

    async def _append(self, entries: list[Entry]) -> bool:
        """Appends the entries (acks=all) and waits for their commit; on a failure drops the
        slot, whose state holds entries that may never commit, and says so."""
        loop = asyncio.get_running_loop()
        now_ms = int(time.time() * 1000)
        futures = []
        for batch, count in batches(entries, now_ms):
            waiter = Waiter(loop.create_future())
            self.shell.propose(Proposal(self.replica, batch, count, now_ms, waiter))
            futures.append(waiter.future)
        try:
            await asyncio.wait_for(asyncio.gather(*futures), self.shell.write_timeout_s)
            return True
        except (asyncio.CancelledError, NodeFailStopped):
            raise
        except Exception as error:  # NotLeader, ProposalDropped, NotCommitted, TimeoutError
            reason = str(error) or type(error).__name__
            log.info("a write to %s failed (%s): the coordinator is rebuilt from the log",
                     self.replica.group, reason)  # fmt: skip
            group = self.replica.group
            self.drop(
                CoordinatorUnavailable(f"the coordinator of {group} is being rebuilt; retry"),
                Failure.WRITE,
                CoordinatorUnavailable(
                    f"the write to {group} failed ({reason}): the outcome is unknown; retry"
                ),
            )
            return False


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
