"""A small, fully controlled harness for scripted Raft scenarios: nodes over `MemoryLog`s, a
message queue delivered on demand, links cut and healed by hand. The `group` fixture builds one."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import pytest

from raft.config import RaftConfig
from raft.core import RaftNode
from raft.faults import NO_FAULTS, RaftFaults
from raft.log import MemoryLog
from raft.sim.checker import Checker
from raft.types import Configuration, HardState, LogPosition, Message, NodeId, Role


class Group:
    def __init__(
        self,
        voters: Iterable[NodeId],
        *,
        learners: Iterable[NodeId] = (),
        config: RaftConfig | None = None,
        faults: RaftFaults = NO_FAULTS,
        seed: int = 1,
    ) -> None:
        self.config = config or RaftConfig()
        self.bootstrap = Configuration(frozenset(voters), frozenset(learners))
        self.faults = faults
        self.seed = seed
        self.logs: dict[NodeId, MemoryLog] = {}
        self.hard: dict[NodeId, HardState] = {}
        self.nodes: dict[NodeId, RaftNode] = {}
        self.queue: list[Message] = []
        self.sent: list[Message] = []  # every message ever sent, for assertions
        self.cut: set[tuple[NodeId, NodeId]] = set()
        self.checker = Checker()
        self.led: dict[NodeId, int] = {}  # the last term each node was seen leading
        self.boots: dict[NodeId, Configuration] = {}  # the configuration each node started with
        self.floors: dict[NodeId, LogPosition] = {}  # vote floors kept by retired replicas
        self.defer_sync: set[NodeId] = set()  # leaders that send before their fsync
        for node_id in sorted(self.bootstrap.members):
            self.add(node_id, self.bootstrap)

    def add(self, node_id: NodeId, bootstrap: Configuration | None = None) -> RaftNode:
        self.logs[node_id] = MemoryLog()
        self.hard[node_id] = HardState()
        return self.start(node_id, bootstrap if bootstrap is not None else Configuration())

    def start(self, node_id: NodeId, bootstrap: Configuration | None = None) -> RaftNode:
        rng = random.Random(f"{self.seed}/{node_id}")
        boot = bootstrap if bootstrap is not None else self.bootstrap
        self.boots[node_id] = boot
        node = RaftNode(
            node_id, boot, self.logs[node_id], self.hard[node_id], self.config, rng,
            faults=self.faults,
        )  # fmt: skip
        node.restore_vote_floor(self.floors.get(node_id, LogPosition()))
        self.nodes[node_id] = node
        return node

    def crash(self, node_id: NodeId) -> None:
        del self.nodes[node_id]
        self.logs[node_id] = self.logs[node_id].crashed()

    def restart(self, node_id: NodeId) -> RaftNode:
        """A crash (unsynced writes lost) and a restart with the configuration it started with."""
        self.crash(node_id)
        return self.start(node_id, self.boots[node_id])

    def retire(self, node_id: NodeId) -> RaftNode:
        """What the host does with a replica its group removed (`RaftNode.removed_at`): its log
        is deleted, its term and vote are kept, and it re-opens (for a leader adding it back)
        with an empty configuration. It keeps its vote floor too (`RaftNode.vote_floor`)."""
        self.floors[node_id] = self.nodes.pop(node_id).vote_floor
        kept = self.hard[node_id]
        self.logs[node_id] = MemoryLog()
        self.hard[node_id] = HardState(kept.term, kept.vote, 0)
        return self.start(node_id, Configuration())

    # -- the host loop ------------------------------------------------------------------------
    def drain(self, node_id: NodeId) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        log = self.logs[node_id]
        while node.has_ready():
            ready = node.ready()
            if ready.boundary is not None:
                log.reset(ready.boundary)
            if ready.truncate_from is not None:
                log.truncate_from(ready.truncate_from)
            log.append(ready.entries)
            self.checker.on_append(node_id, log, ready.entries)
            defer = node_id in self.defer_sync and ready.send_before_persist
            if not defer:
                log.sync()
            if ready.hard_state is not None:
                self.hard[node_id] = ready.hard_state
            self.queue.extend(ready.messages)
            self.sent.extend(ready.messages)
            if ready.committed is not None:
                low, high = ready.committed
                self.checker.on_commit(node_id, log.entries(low, high + 1, 1 << 62))
            node.advance(ready, durable=not defer)
            if node.role is Role.LEADER and self.led.get(node_id) != node.term:
                self.led[node_id] = node.term
                self.checker.on_leader(node_id, node.term, node.log, node.applied_index)

    def fsync(self, node_id: NodeId) -> None:
        """Completes a deferred fsync of a leader's entries."""
        log = self.logs[node_id]
        log.sync()
        self.nodes[node_id].report_durable(log.last_index, log.term(log.last_index))
        self.drain(node_id)

    def deliver(
        self, *, rounds: int = 10_000, keep: Callable[[Message], bool] | None = None
    ) -> int:
        """Delivers queued messages (and their consequences) until none is left; messages on
        cut links are lost. `keep(m)` True holds a message back in the queue instead."""
        delivered = 0
        held: list[Message] = []
        for _ in range(rounds):
            if not self.queue:
                break
            batch, self.queue = self.queue, []
            for message in batch:
                if keep is not None and keep(message):
                    held.append(message)
                    continue
                node = self.nodes.get(message.recipient)
                if node is None or (message.sender, message.recipient) in self.cut:
                    continue
                node.step(message)
                delivered += 1
                self.drain(message.recipient)
        self.queue.extend(held)
        return delivered

    def tick(self, count: int = 1, only: Iterable[NodeId] | None = None) -> None:
        for _ in range(count):
            for node_id in sorted(only if only is not None else self.nodes):
                node = self.nodes.get(node_id)
                if node is not None:
                    node.tick()
                    self.drain(node_id)
            self.deliver()

    def run(self, node_id: NodeId, action: Callable[[RaftNode], object]) -> object:
        result = action(self.nodes[node_id])
        self.drain(node_id)
        return result

    # -- elections and partitions ----------------------------------------------------------------
    def elect(self, node_id: NodeId, *, limit: int = 200, settle: bool = True) -> RaftNode:
        """Ticks only `node_id` (others are slower) until it leads. `settle=False`: whatever
        the new leader sends is lost (it is cut off the moment it wins)."""
        node = self.nodes[node_id]
        for _ in range(limit):
            if node.role is Role.LEADER:
                if settle:
                    self.deliver()
                else:
                    self.queue.clear()
                return node
            node.tick()
            self.drain(node_id)
            self.deliver(keep=lambda _: node.role is Role.LEADER)
        raise AssertionError(
            f"{node_id} did not become leader ({node.role.name}, term {node.term})"
        )

    def leaders(self) -> list[NodeId]:
        return sorted(i for i, n in self.nodes.items() if n.role is Role.LEADER)

    def isolate(self, node_id: NodeId) -> None:
        for other in self.logs:
            if other != node_id:
                self.cut |= {(node_id, other), (other, node_id)}

    def split(self, side: Iterable[NodeId], other_side: Iterable[NodeId]) -> None:
        for a in side:
            for b in other_side:
                self.cut |= {(a, b), (b, a)}

    def heal(self) -> None:
        self.cut.clear()


@pytest.fixture
def group() -> type[Group]:
    return Group
