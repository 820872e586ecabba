"""`SimCluster`: many `Swim` members on one `SimNetwork`, driven tick by tick, with ground truth.

The cluster is the host of every member: each `step()` delivers due messages (a running member
handles them at once; a paused member's are kept, up to `backlog_limit`, for when it resumes; a
slow member's are held back `slow_delay_ticks` more), ticks every running member, sends what
their outboxes hold, and delivers the messages due in this very tick (zero delay) round after
round; it records every event with the tick it happened in.

Faults: `crash` (the member stops for good; its messages are lost), `pause`/`resume` (it stops
ticking and handling messages, then carries on with its old state, like SIGSTOP/SIGCONT), `slow`
(its inbound messages arrive late, like a CPU-starved process), `partition`/`heal`, `join` of a new
member through a seed address, and `leave` (graceful; the member keeps answering for one probe
interval, then stops).

Ground truth for the checkers: which members are up, and whether a `dead` declaration about a
member was *false*: the member was up (not crashed, not left, not in or just after a pause longer
than the minimum suspicion timeout) and connected to the declarer throughout the window
`W = suspicion_max_timeout + 2 · probe_interval · awareness_max_multiplier` before it.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from membership.config import SwimConfig
from membership.messages import Message
from membership.sim.network import NetworkConfig, SimNetwork
from membership.swim import Swim
from membership.types import EventKind, Member, MembershipEvent, MemberState

__all__ = ["NodeStatus", "RecordedEvent", "SimCluster", "SimNode", "SwimFactory"]

SwimFactory = Callable[[Member, SwimConfig, random.Random], Swim]


class NodeStatus(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    CRASHED = "crashed"
    STOPPED = "stopped"  # left gracefully and shut down


@dataclass(slots=True)
class SimNode:
    swim: Swim
    status: NodeStatus = NodeStatus.RUNNING
    backlog: list[Message] = field(default_factory=list)
    slow_until_tick: int = -1
    stop_at_tick: int | None = None


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    tick: int
    observer_id: str
    event: MembershipEvent
    false_dead: bool
    phase: str


@dataclass(slots=True)
class _Pause:
    member_id: str
    start_tick: int
    end_tick: int | None
    excused: bool


@dataclass(slots=True)
class _Partition:
    start_tick: int
    end_tick: int | None
    group_of: dict[str, int]


_MAX_DELIVERY_ROUNDS = 32


def address_of(member_id: str) -> str:
    return f"sim://{member_id}"


class SimCluster:
    def __init__(
        self,
        config: SwimConfig,
        network: NetworkConfig,
        seed: int,
        *,
        swim_factory: SwimFactory = Swim,
        backlog_limit: int = 256,
        slow_delay_ticks: int = 10,
    ) -> None:
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.network = SimNetwork(network, random.Random(self.rng.getrandbits(64)))
        self.swim_factory = swim_factory
        self.backlog_limit = backlog_limit
        self.slow_delay_ticks = slow_delay_ticks
        self.now = 0
        self.nodes: dict[str, SimNode] = {}
        self._by_address: dict[str, SimNode] = {}
        self.events: list[RecordedEvent] = []
        self.crashed_at: dict[str, int] = {}
        self.left_at: dict[str, int] = {}
        self._pauses: list[_Pause] = []
        self._partitions: list[_Partition] = []
        self._slow_inbox: list[tuple[int, str, Message]] = []
        self.node_seconds = 0.0
        self.refutations = 0
        self.phase = "start"  # a label the scenario sets; recorded with every event

    # -- building ---------------------------------------------------------------------------

    def add_node(
        self,
        member_id: str,
        *,
        seeds: list[str] | None = None,
        rack: str = "",
        weight: float = 1.0,
        factory: SwimFactory | None = None,
    ) -> SimNode:
        member = Member(member_id, address_of(member_id), weight, rack, "sim")
        make = factory or self.swim_factory
        swim = make(member, self.config, random.Random(self.rng.getrandbits(64)))
        node = SimNode(swim)
        self.nodes[member_id] = node
        self._by_address[member.address] = node
        swim.join([address_of(s) for s in seeds or []])
        self._drain(node)
        return node

    @classmethod
    def bootstrap(
        cls,
        size: int,
        config: SwimConfig,
        network: NetworkConfig,
        seed: int,
        *,
        swim_factory: SwimFactory = Swim,
    ) -> SimCluster:
        """`size` members n00, n01, ...; every member joins through n00 at tick 0."""
        cluster = cls(config, network, seed, swim_factory=swim_factory)
        for index in range(size):
            member_id = f"n{index:02d}"
            cluster.add_node(member_id, seeds=[] if index == 0 else ["n00"], rack=f"r{index % 4}")
        return cluster

    # -- ground truth -----------------------------------------------------------------------

    def up_ids(self) -> set[str]:
        """Members that exist for the cluster: running, paused or slow (not crashed, not left)."""
        return {
            m
            for m, node in self.nodes.items()
            if node.status in (NodeStatus.RUNNING, NodeStatus.PAUSED) and m not in self.left_at
        }

    def running_ids(self) -> list[str]:
        return [m for m, node in self.nodes.items() if node.status is NodeStatus.RUNNING]

    def window_ticks(self) -> int:
        config = self.config
        n = max(2, len(self.nodes))
        return (
            config.suspicion_max_timeout_ticks(n)
            + 2 * config.probe_interval_ticks * config.awareness_max_multiplier
        )

    def _connected_throughout(self, a: str, b: str, start: int, end: int) -> bool:
        for part in self._partitions:
            part_end = self.now if part.end_tick is None else part.end_tick
            overlaps = part.start_tick <= end and part_end >= start
            if overlaps and part.group_of.get(a, 0) != part.group_of.get(b, 0):
                return False
        return True

    def is_false_dead(self, member_id: str, declared_by: str | None, tick: int) -> bool:
        if member_id in self.crashed_at or member_id in self.left_at:
            return False
        window = self.window_ticks()
        for pause in self._pauses:
            if pause.member_id == member_id and pause.excused:
                end = self.now if pause.end_tick is None else pause.end_tick
                if pause.start_tick <= tick <= end + window:
                    return False
        declarer = declared_by or member_id
        return self._connected_throughout(declarer, member_id, tick - window, tick)

    def false_dead_events(self) -> list[RecordedEvent]:
        return [e for e in self.events if e.false_dead]

    # -- views ------------------------------------------------------------------------------

    def view(self, member_id: str) -> set[str]:
        return {m.id for m in self.nodes[member_id].swim.live_members()}

    def converged(self) -> bool:
        """Every running member's live list equals the set of members that are up."""
        truth = self.up_ids()
        size = len(truth)
        for member_id in self.running_ids():
            if member_id in self.left_at:
                continue
            swim = self.nodes[member_id].swim
            if swim.live_count() != size or self.view(member_id) != truth:
                return False
        return True

    def all_see_not_live(self, member_id: str) -> bool:
        for observer in self.running_ids():
            state = self.nodes[observer].swim.member_state(member_id)
            if state is not None and state.is_live:
                return False
        return True

    # -- faults -----------------------------------------------------------------------------

    def crash(self, member_id: str) -> None:
        self.nodes[member_id].status = NodeStatus.CRASHED
        self.crashed_at[member_id] = self.now

    def pause(self, member_id: str, *, excused: bool) -> None:
        """Stop `member_id`; `excused` says a `dead` verdict about it would be legitimate."""
        self.nodes[member_id].status = NodeStatus.PAUSED
        self._pauses.append(_Pause(member_id, self.now, None, excused))

    def resume(self, member_id: str) -> None:
        node = self.nodes[member_id]
        node.status = NodeStatus.RUNNING
        for pause in self._pauses:
            if pause.member_id == member_id and pause.end_tick is None:
                pause.end_tick = self.now
        backlog, node.backlog = node.backlog, []
        for message in backlog:
            self._handle(member_id, node, message)
        self._drain(node)

    def slow(self, member_id: str, duration_ticks: int) -> None:
        self.nodes[member_id].slow_until_tick = self.now + duration_ticks

    def partition(self, groups: list[set[str]]) -> None:
        self.network.partition([{address_of(m) for m in group} for group in groups])
        group_of = {m: index + 1 for index, group in enumerate(groups) for m in group}
        self._partitions.append(_Partition(self.now, None, group_of))

    def heal(self) -> None:
        self.network.heal()
        for part in self._partitions:
            if part.end_tick is None:
                part.end_tick = self.now

    def leave(self, member_id: str) -> None:
        node = self.nodes[member_id]
        node.swim.leave()
        node.stop_at_tick = self.now + self.config.probe_interval_ticks
        self.left_at[member_id] = self.now
        self._drain(node)

    # -- running ----------------------------------------------------------------------------

    def _handle(self, member_id: str, node: SimNode, message: Message) -> None:
        before = node.swim.incarnation
        node.swim.receive(message)
        if node.swim.incarnation > before and not node.swim.leaving:
            self.refutations += 1

    def _drain(self, node: SimNode) -> None:
        swim = node.swim
        address = swim.self_member.address
        for outgoing in swim.take_outbox():
            self.network.send(self.now, address, outgoing)
        for event in swim.take_events():
            false_dead = event.kind is EventKind.DEAD and self.is_false_dead(
                event.member.id, event.declared_by, self.now
            )
            self.events.append(
                RecordedEvent(self.now, swim.self_member.id, event, false_dead, self.phase)
            )

    def step(self) -> None:
        """One tick: deliver what is due, tick every running member, then deliver what they sent
        with no delay, round after round (a LAN round trip is far shorter than a tick)."""
        self.now += 1
        now = self.now
        self._deliver_due(now)
        for node in self.nodes.values():
            if node.status is not NodeStatus.RUNNING:
                continue
            if node.stop_at_tick is not None and now >= node.stop_at_tick:
                node.status = NodeStatus.STOPPED
                continue
            node.swim.tick()
            self._drain(node)
        self._deliver_due(now)
        self.node_seconds += len(self.up_ids()) * self.config.tick_ms / 1000.0

    def _deliver_due(self, now: int) -> None:
        for _ in range(_MAX_DELIVERY_ROUNDS):
            batch: list[tuple[str, Message, bool]] = []
            if self._slow_inbox:
                batch.extend((a, m, False) for t, a, m in self._slow_inbox if t <= now)
                self._slow_inbox = [item for item in self._slow_inbox if item[0] > now]
            batch.extend((a, m, True) for a, m in self.network.due(now))
            if not batch:
                return
            touched: dict[str, None] = {}  # insertion-ordered, so that replays are exact
            for address, message, allow_slow in batch:
                self._deliver(address, message, touched, allow_slow=allow_slow)
            for member_id in touched:
                self._drain(self.nodes[member_id])

    def _deliver(
        self, address: str, message: Message, touched: dict[str, None], *, allow_slow: bool
    ) -> None:
        node = self._by_address.get(address)
        if node is None:
            return
        if node.status is NodeStatus.PAUSED:
            if len(node.backlog) < self.backlog_limit:
                node.backlog.append(message)
            return
        if node.status is not NodeStatus.RUNNING:
            return
        if allow_slow and node.slow_until_tick >= self.now:
            self._slow_inbox.append((self.now + self.slow_delay_ticks, address, message))
            return
        member_id = node.swim.self_member.id
        self._handle(member_id, node, message)
        touched[member_id] = None

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    def run_until(self, condition: Callable[[], bool], limit_ticks: int) -> int | None:
        """Step until `condition()` holds; the ticks it took, or None after `limit_ticks`."""
        start = self.now
        while self.now - start < limit_ticks:
            if condition():
                return self.now - start
            self.step()
        return self.now - start if condition() else None

    def states_of(self, member_id: str) -> dict[str, MemberState | None]:
        """How every running member sees `member_id`."""
        return {o: self.nodes[o].swim.member_state(member_id) for o in self.running_ids()}
