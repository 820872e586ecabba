"""One simulated process hosting one `RaftNode`: its disk (a `MemoryLog` and a hard state), the
way it carries out each `Ready`, its fsyncs, and what a crash and restart do to it.

This is the simulator's model of `cluster/`'s MultiRaft host, and follows the persistence
contract of `raft.core` to the letter — except where a test-only fault says otherwise. A leader's
Ready marked `send_before_persist` is, at random, sent before its fsync, which then completes a
few ticks later (`report_durable`); a crash before that loses the unsynced writes.

On a simulated disk, a write or fsync that fails (`StorageError`, `OSError`) makes the host
fail-stop, as a node does (`cluster.failstop`): it crashes then and there — nothing of the Ready
is sent — and restarts later from what recovery finds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from raft.config import RaftConfig
from raft.core import RaftNode
from raft.faults import NO_FAULTS, RaftFaults
from raft.log import MemoryLog
from raft.ready import Ready
from raft.sim.checker import Checker
from raft.sim.disk import DiskDamaged, DiskLog, DiskStore
from raft.types import Configuration, EntryKind, HardState, LogPosition, Message, NodeId, Role
from storage import StorageError

__all__ = ["SimHost"]

_BIG = 1 << 62


class _Sender(Protocol):
    def __call__(self, message: Message) -> None: ...


class SimHost:
    __slots__ = (
        "bootstrap",
        "checker",
        "config",
        "dead",
        "faults",
        "flip_rate",
        "hard_state",
        "hosts",
        "id",
        "leader_commit",
        "leader_commit_sent",
        "log",
        "node",
        "on_collect",
        "on_crash",
        "parallel_rate",
        "pivot_crash_rate",
        "rng",
        "send",
        "stats",
        "store",
        "sync_due",
        "vote_floor",
        "was_leader_term",
    )

    def __init__(
        self,
        node_id: NodeId,
        bootstrap: Configuration,
        config: RaftConfig,
        rng: random.Random,
        checker: Checker,
        send: _Sender,
        stats: dict[str, int],
        hosts: dict[NodeId, SimHost],
        *,
        parallel_rate: float,
        pivot_crash_rate: float = 0.0,
        on_crash: Callable[[SimHost], None] | None = None,
        on_collect: Callable[[SimHost], None] | None = None,
        faults: RaftFaults = NO_FAULTS,
        disk: str = "memory",
        flip_rate: float = 0.0,
        io_error_rate: float = 0.0,
        io_errors: bool = False,
    ) -> None:
        self.id = node_id
        self.bootstrap = bootstrap
        self.config = config
        self.rng = rng
        self.checker = checker
        self.send = send
        self.stats = stats
        self.hosts = hosts
        self.leader_commit = 0
        self.leader_commit_sent = 0
        self.parallel_rate = parallel_rate
        self.pivot_crash_rate = pivot_crash_rate
        self.on_crash = on_crash
        self.on_collect = on_collect
        self.faults = faults
        self.log: MemoryLog | DiskLog = MemoryLog()
        self.hard_state = HardState()
        self.store: DiskStore | None = None
        self.flip_rate = flip_rate  # chance a crash also flips a bit in a sealed segment
        self.dead = False  # fail-stop: its disk was found damaged
        if disk != "memory":
            self.store = DiskStore(node_id, random.Random(rng.getrandbits(64)), disk)
            self.store.error_rate = io_error_rate
            self.log, self.hard_state = self.store.open()
            self.store.set_errors(io_errors)
        self.vote_floor = LogPosition()  # kept when the log is deleted (`RaftNode.vote_floor`)
        self.sync_due: int | None = None
        self.was_leader_term = -1
        self.node: RaftNode | None = None
        self.start()

    @property
    def up(self) -> bool:
        return self.node is not None

    def start(self) -> None:
        """(Re)starts the process from what its disk holds; a dead host stays down."""
        if self.dead:
            return
        node_rng = random.Random(self.rng.getrandbits(64))
        self.node = RaftNode(
            self.id, self.bootstrap, self.log, self.hard_state, self.config, node_rng,
            faults=self.faults,
        )  # fmt: skip
        self.node.restore_vote_floor(self.vote_floor)
        self.was_leader_term = -1
        self.checker.on_restart(self.id, self.log, self.node.commit)

    def crash(self) -> None:
        """Loses the process and every write its disk had not made durable."""
        self.node = None
        self.sync_due = None
        if self.store is not None:
            flip = bool(self.flip_rate) and self.rng.random() < self.flip_rate
            try:
                assert isinstance(self.log, DiskLog)
                self.log, self.hard_state = self.store.crash(self.log, flip)
            except DiskDamaged:
                # It never serves what it cannot verify: it stays down. Its old log stays
                # for the checker only (its durable part: what it acknowledged before).
                self.dead = True
        else:
            assert isinstance(self.log, MemoryLog)
            self.log = self.log.crashed(self.rng)

    # -- driving the node ---------------------------------------------------------------------------
    def run(self, action: Callable[[RaftNode], object], now: int) -> None:
        """Runs one input on the node, then carries out whatever it made ready."""
        node = self.node
        if node is None:
            return  # crashed earlier in this tick
        action(node)
        self.process_ready(now)

    def process_ready(self, now: int) -> None:
        node = self.node
        if node is None:
            return
        self._check_leader(node)
        while node.has_ready():
            if not self._handle(node, node.ready(), now):
                return
            self._check_leader(node)
        if node.removed_at:
            self.collect()

    def collect(self) -> None:
        """The node heard it was removed (`Removed`): like `cluster`'s replica retirement, its
        log is deleted and its term, vote and vote floor are kept. It stays down until an
        operator adds it again, when it starts knowing nothing but them, and with no
        configuration of its own."""
        log = self.log
        held = LogPosition(log.term(log.last_index), log.last_index)
        node = self.node
        if node is not None:
            held = max(held, node.vote_floor)
        self.vote_floor = max(self.vote_floor, held)
        self.node = None
        self.sync_due = None
        kept = self.hard_state
        self.hard_state = HardState(kept.term, kept.vote, 0)
        if self.store is not None:
            self.log, self.hard_state = self.store.wipe(self.hard_state)
        else:
            self.log = MemoryLog()
        self.bootstrap = Configuration()
        if self.on_collect is not None:
            self.on_collect(self)

    def _check_leader(self, node: RaftNode) -> None:
        if node.role is not Role.LEADER:
            return
        if node.term != self.was_leader_term:
            self.was_leader_term = node.term
            self.leader_commit = node.commit
            self.stats["elections"] += 1
            self.checker.on_leader(self.id, node.term, node.log, node.applied_index)
        if node.commit > self.leader_commit:
            low = max(self.leader_commit + 1, node.log.first_index)
            self.leader_commit = node.commit
            term = node.log.term(node.commit)
            assert term is not None
            logs = {host_id: host.log for host_id, host in self.hosts.items()}
            voters = sorted(node.configuration.voters)
            self.checker.on_leader_commit(self.id, node.term, node.commit, term, voters, logs)
            # The leader's decision is the commit point, whether or not it lives to apply it.
            entries = node.log.entries(low, node.commit + 1, _BIG)
            self.checker.on_commit(self.id, entries, decided_in_term=node.term)

    def set_io_errors(self, on: bool) -> None:
        """A simulated disk's injected write and fsync errors on or off (`DiskStore`)."""
        if self.store is not None:
            self.store.set_errors(on)

    def compact(self, index: int) -> None:
        """Compacts the log through `index` (a disk error fail-stops the host)."""
        try:
            self.log.compact(index)
        except (StorageError, OSError):
            self._fail_stop()
            return
        self.stats["compactions"] += 1

    def _fail_stop(self) -> None:
        """A write or fsync failed: the process stops at once (`cluster.failstop`)."""
        if self.store is None:
            raise AssertionError(f"{self.id}: a disk error without a simulated disk")
        self.stats["io_fail_stops"] += 1
        self.crash()
        if self.on_crash is not None:
            self.on_crash(self)

    def _handle(self, node: RaftNode, ready: Ready, now: int) -> bool:
        """Carries out one Ready; False if the process crashed doing it."""
        early = ready.send_before_persist and (
            self.faults.ack_before_persist or self.rng.random() < self.parallel_rate
        )
        try:
            self._persist(node, ready, early)
        except (StorageError, OSError):
            self._fail_stop()
            return False
        if self._pivot(node, ready):
            # A crash between persisting and sending, at a pivotal moment: just elected, or
            # just committed. The Ready's messages never leave the process.
            self.crash()
            if self.on_crash is not None:
                self.on_crash(self)
            return False
        log = self.log
        for message in ready.messages:
            self.send(message)
        if ready.committed is not None:
            low, high = ready.committed
            entries = log.entries(low, high + 1, _BIG)
            self.checker.on_commit(self.id, entries)
            self.stats["commits"] += len(entries)
        if early:
            if self.sync_due is None:
                self.sync_due = now + self.rng.randint(0, 2)
            node.advance(ready, durable=False)
        else:
            node.advance(ready)
        return True

    def _persist(self, node: RaftNode, ready: Ready, early: bool) -> None:
        """The Ready's writes: its log changes (synced unless sent early) and its hard state."""
        log = self.log
        if ready.boundary is not None:
            log.reset(ready.boundary)
        if ready.truncate_from is not None:
            if node.role is Role.LEADER and ready.truncate_from <= node.commit:
                raise AssertionError("a leader truncated its own committed log")
            log.truncate_from(ready.truncate_from)
        if ready.entries:
            log.append(ready.entries)
            self.checker.on_append(self.id, log, ready.entries)
        if not early:
            log.sync()
            self.sync_due = None
        if ready.hard_state is not None:
            self.hard_state = ready.hard_state
            if self.store is not None:
                self.store.save(ready.hard_state)

    def _pivot(self, node: RaftNode, ready: Ready) -> bool:
        if not self.pivot_crash_rate or node.role is not Role.LEADER:
            return False
        elected = any(e.kind is EntryKind.NOOP and e.term == node.term for e in ready.entries)
        committed = (
            ready.hard_state is not None and ready.hard_state.commit > self.leader_commit_sent
        )
        self.leader_commit_sent = node.commit
        return (elected or committed) and self.rng.random() < self.pivot_crash_rate

    def fsync_completes(self, now: int) -> None:
        """The background fsync of an early-sent Ready finishes."""
        self.sync_due = None
        log = self.log
        try:
            log.sync()
        except (StorageError, OSError):
            self._fail_stop()
            return
        # on a simulated disk, durable is what the log says its fsyncs covered
        durable = log.durable_last_index if isinstance(log, DiskLog) else log.last_index
        node = self.node
        if node is not None and durable >= log.first_index:
            node.report_durable(durable, log.term(durable))
            self.process_ready(now)
