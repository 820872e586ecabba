"""The simulation of one Raft group from one seed: nodes, network, nemesis, clients, operator.

A run alternates two phases:

- chaos: messages are dropped, delayed, duplicated and reordered; nodes crash (losing unsynced
  writes) and restart; partitions isolate one node, split majority from minority, or leave a
  bridge node connected to both sides; leadership is transferred; an operator adds learners,
  promotes them, removes members (the leader included); nodes compact their logs; clients
  propose at random; membership churn removes a member, wipes it and adds it back beside a
  stale one (`raft.sim.churn`).
- calm: partitions heal, crashed nodes restart, nothing is dropped (delays, duplicates and
  reordering remain). A leader must appear within `leader_bound_ticks`, and every proposal made
  in the calm phase must commit within `commit_bound_ticks` of its first attempt (the client
  retries on NotLeader and re-proposes after a change of leader).

One simulated step is one tick. Every random choice comes from `random.Random(seed)`, and sets
are never iterated unsorted, so a seed replays exactly in any process.

Why one module of ~550 lines: the simulated cluster is one world (the nodes, the network, the
disks, the clients, the clock) whose every step must stay in one seeded order; the checks live in
their own modules.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import partial

from raft.codec import decode_message, encode_message
from raft.core import RaftNode
from raft.errors import RaftError
from raft.faults import NO_FAULTS, RaftFaults
from raft.sim.checker import Checker, Violation
from raft.sim.churn import Churn
from raft.sim.host import SimHost
from raft.sim.network import Network
from raft.sim.profile import SimProfile
from raft.types import (
    AppendRequest,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    Heartbeat,
    LogReset,
    Message,
    NodeId,
    Role,
)

__all__ = ["IO_ERROR_RATES", "STAT_NAMES", "Simulation", "io_error_rate_of"]

STAT_NAMES = (
    "elections",
    "commits",
    "proposals",
    "config_changes",
    "transfers",
    "crashes",
    "partitions",
    "compactions",
    "lease_reads",
    "collections",
    "churns",
    "fail_stops",
    "io_fail_stops",
)
_DELIVERY_ROUNDS = 64
_FLIP_RATE = 0.2
# of each write and fsync in a chaos phase, on a simulated disk: drawn per seed (on a generator
# of its own, so the rest of the run draws what it did before), a third of the seeds error-free
IO_ERROR_RATES = (0.0, 1e-3, 1e-2)
_FROM_LEADER = (AppendRequest, Heartbeat, LogReset)


def io_error_rate_of(seed: int) -> float:
    """The chance each write and fsync of seed `seed`'s chaos phases fails, on a simulated disk."""
    return random.Random(f"io-{seed}").choice(IO_ERROR_RATES)


class Simulation:
    def __init__(
        self, seed: int, nodes: int, *, faults: RaftFaults = NO_FAULTS, disk: str = "memory"
    ) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        flip_rate = 0.0 if disk == "memory" else _FLIP_RATE
        io_error_rate = 0.0 if disk == "memory" else io_error_rate_of(seed)
        self.profile = profile = dataclasses.replace(
            SimProfile.draw(rng, nodes), disk=disk, flip_rate=flip_rate, io_error_rate=io_error_rate
        )
        self.faults = faults
        self.checker = Checker()
        self.network = Network(random.Random(rng.getrandbits(64)), profile.network)
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        self.hosts: dict[NodeId, SimHost] = {}
        self.now = 0
        ids = [f"n{i}" for i in range(1, nodes + 1)]
        # at most one host's disk takes bit flips, and only in a group of five (so four
        # remain when it fails, and a quorum survives the membership changes)
        self._flip_host = "n1" if profile.flip_rate and nodes == 5 else None
        self._next_id = nodes + 1
        bootstrap = Configuration(frozenset(ids))
        self.calm = False
        for node_id in ids:
            self._add_host(node_id, bootstrap)
        self.down_until: dict[NodeId, int] = {}
        self.retired: set[NodeId] = set()
        self.collected: set[NodeId] = set()  # removed, told so, log deleted (`SimHost.collect`)
        self.phase_end = self._chaos_length()
        self.heal_tick = 0
        self.leader_seen = False
        self.goal: tuple[str, NodeId] | None = None
        self.pending: list[_Proposal] = []  # calm-phase proposals not yet committed
        self._proposal_number = 0
        self.max_leader_wait = 0
        self.max_commit_wait = 0
        self.churn = Churn(self)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> None:
        self.now += 1
        now = self.now
        rng = self.rng
        profile = self.profile
        if now >= self.phase_end:
            self._end_phase()
        if not self.calm:
            self._nemesis()
        for node_id in sorted(self.down_until):
            if self.down_until[node_id] <= now:
                del self.down_until[node_id]
                self._restart(node_id)
        for host in self._live_hosts():
            if host.sync_due is not None and host.sync_due <= now:
                host.fsync_completes(now)
        self._client()
        if not self.calm:
            self.churn.step()
            if profile.config_rate and not self.churn.active and rng.random() < profile.config_rate:
                self._operate()
            if profile.transfer_rate and rng.random() < profile.transfer_rate:
                self._transfer()
        if profile.compact_rate and rng.random() < profile.compact_rate:
            self._compact()
        self._deliver()
        for host in self._live_hosts():
            node = host.node
            assert node is not None
            if node.quiesced:
                continue
            host.run(_tick, now)
            if profile.quiesce and host.up and node.role is Role.LEADER and rng.random() < 0.3:
                host.run(_quiesce, now)
        self._deliver()
        self._check_lease_reads()
        if self.calm:
            self._check_liveness()

    def _deliver(self) -> None:
        now = self.now
        hosts = self.hosts
        codec_rate = self.profile.codec_rate
        rng = self.rng
        for _ in range(_DELIVERY_ROUNDS):
            batch = self.network.due(now)
            if not batch:
                return
            for message in batch:
                host = hosts.get(message.recipient)
                if host is None:
                    continue
                if host.node is None:
                    if host.id not in self.collected or not isinstance(message, _FROM_LEADER):
                        continue
                    self._revive(host.id)  # as `cluster` re-opens a replica a leader wants
                if codec_rate and rng.random() < codec_rate:
                    host.run(partial(_step, _round_trip(message)), now)
                else:
                    host.run(partial(_step, message), now)

    def send(self, message: Message) -> None:
        self.network.send(message, self.now)

    # -- phases -----------------------------------------------------------------------------------------
    def _chaos_length(self) -> int:
        low, high = self.profile.chaos_ticks
        return self.now + self.rng.randint(low, high)

    def _end_phase(self) -> None:
        if self.calm:
            self.calm = False
            self.network.calm = False
            for host in self.hosts.values():
                host.pivot_crash_rate = self.profile.pivot_crash_rate
                host.set_io_errors(True)
            self.phase_end = self._chaos_length()
            self.pending.clear()
            return
        self.calm = True
        self.churn.abandon()
        self.network.calm = True
        for host in self.hosts.values():
            host.pivot_crash_rate = 0.0
            host.set_io_errors(False)
        self.network.heal()
        for node_id in sorted(self.down_until):
            self._restart(node_id)
        self.down_until.clear()
        self._wake_all()
        self.heal_tick = self.now
        self.leader_seen = False
        self.phase_end = self.now + self.profile.calm_ticks

    def _check_lease_reads(self) -> None:
        """A lease read must see every entry committed anywhere so far (linearizability)."""
        committed = self.checker.commit_index
        for host in self._live_hosts():
            node = host.node
            assert node is not None
            if node.role is not Role.LEADER:
                continue
            index = node.lease_read_index()
            if index is None:
                continue
            self.stats["lease_reads"] += 1
            if index < committed:
                raise Violation(
                    "stale-lease-read",
                    f"{host.id} (term {node.term}) would serve a lease read at index {index}, "
                    f"but index {committed} is already committed",
                )

    def _check_liveness(self) -> None:
        now = self.now
        profile = self.profile
        if not self.leader_seen:
            if self._leader() is not None:
                self.leader_seen = True
                self.max_leader_wait = max(self.max_leader_wait, now - self.heal_tick)
            elif now - self.heal_tick > profile.leader_bound_ticks:
                raise Violation(
                    "liveness",
                    f"no leader {profile.leader_bound_ticks} ticks after the heal at tick "
                    f"{self.heal_tick}",
                )
        committed = self.checker.committed_data
        still: list[_Proposal] = []
        for proposal in self.pending:
            if proposal.data in committed:
                self.max_commit_wait = max(self.max_commit_wait, now - proposal.first_tick)
                continue
            if now - proposal.first_tick > profile.commit_bound_ticks:
                raise Violation(
                    "liveness",
                    f"calm proposal {proposal.data!r} made at tick {proposal.first_tick} (heal "
                    f"at {self.heal_tick}) not committed within {profile.commit_bound_ticks} ticks",
                )
            still.append(proposal)
        self.pending = still

    # -- clients --------------------------------------------------------------------------------------
    def _client(self) -> None:
        rng = self.rng
        if self.calm:
            late = self.now > self.phase_end - self.profile.commit_bound_ticks
            if not late and rng.random() < self.profile.calm_propose_rate:
                self.pending.append(_Proposal(self._new_data(), self.now))
            leader = self._leader()
            if leader is None:
                return
            node = leader.node
            assert node is not None
            for proposal in self.pending:
                if proposal.term != node.term and self._propose(leader, proposal.data):
                    proposal.term = node.term
            return
        if rng.random() < self.profile.propose_rate:
            live = self._live_hosts()
            if not live:
                return
            target = self._leader() if rng.random() < 0.8 else rng.choice(live)
            if target is not None:
                self._propose(target, self._new_data())

    def _new_data(self) -> bytes:
        self._proposal_number += 1
        return b"p%d" % self._proposal_number

    def _propose(self, host: SimHost, data: bytes) -> bool:
        count = 1 + self.rng.randrange(4)
        try:
            host.run(lambda node: node.propose(data, count), self.now)
        except RaftError:
            return False
        self.stats["proposals"] += 1
        return host.up

    # -- nemesis --------------------------------------------------------------------------------------
    def _nemesis(self) -> None:
        rng = self.rng
        profile = self.profile
        if profile.crash_rate and rng.random() < profile.crash_rate:
            self._crash(self._pick_victim())
        if profile.eager_crash_rate and rng.random() < profile.eager_crash_rate:
            leader = self._leader()
            node = leader.node if leader is not None else None
            if leader is not None and node is not None and node.commit < node.log.last_index:
                self._crash(leader)
        if self.churn.active:
            return  # a churn episode places the partitions itself
        if profile.partition_rate and rng.random() < profile.partition_rate:
            self._partition()
        if self.network.blocked and rng.random() < profile.heal_rate:
            self.network.heal()
            self._wake_all()

    def _pick_victim(self) -> SimHost | None:
        live = self._live_hosts()
        if not live:
            return None
        leader = self._leader()
        return leader if leader is not None and self.rng.random() < 0.5 else self.rng.choice(live)

    def _crash(self, host: SimHost | None) -> None:
        if host is not None:
            host.crash()
            self._crashed(host)

    def _crashed(self, host: SimHost) -> None:
        rng = self.rng
        self.stats["crashes"] += 1
        if host.dead:  # its disk is damaged: it stays down, like a decommissioned node
            self.stats["fail_stops"] += 1
            self.retired.add(host.id)
        self.down_until[host.id] = self.now + 1 + rng.randrange(self.profile.max_down_ticks)
        self.checker.after_crash({i: h.log for i, h in self.hosts.items() if i not in self.retired})
        self._wake_all()

    def _partition(self) -> None:
        rng = self.rng
        ids = sorted(i for i in self.hosts if i not in self.retired)
        rng.shuffle(ids)
        self.network.heal()
        kind = rng.randrange(4)
        if kind == 0:  # isolate one (often the leader)
            leader = self._leader()
            alone = leader.id if leader is not None and rng.random() < 0.5 else ids[0]
            self.network.split([alone], [i for i in ids if i != alone])
        elif kind == 1:  # majority / minority
            cut = rng.randint(1, len(ids) // 2)
            self.network.split(ids[:cut], ids[cut:])
        elif kind == 2 and len(ids) >= 3:  # a bridge node sees both halves
            bridge, rest = ids[0], ids[1:]
            cut = rng.randint(1, len(rest) - 1)
            self.network.split(rest[:cut], rest[cut:])
            assert bridge not in rest
        else:  # a few one-way links
            for _ in range(rng.randint(1, len(ids))):
                a, b = rng.sample(ids, 2)
                self.network.block_one_way(a, b)
        self.stats["partitions"] += 1
        self._wake_all()

    def _restart(self, node_id: NodeId) -> None:
        host = self.hosts[node_id]
        if node_id in self.retired or node_id in self.collected or host.up:
            return
        host.start()
        host.process_ready(self.now)

    def _wake_all(self) -> None:
        """What a membership (SWIM) event does for a MultiRaft host: quiesced groups wake."""
        for host in self._live_hosts():
            assert host.node is not None
            host.node.wake()

    # -- operator: transfers, configuration changes, retention -----------------------------------------
    def _transfer(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        node = leader.node
        assert node is not None
        others = [v for v in sorted(node.configuration.voters) if v != leader.id]
        if others:
            target = self.rng.choice(others)
            leader.run(lambda n: n.transfer_leader(target), self.now)
            self.stats["transfers"] += 1

    def _operate(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        node = leader.node
        assert node is not None
        config = node.configuration
        rng = self.rng
        if self.goal is None:
            voters, learners = sorted(config.voters), sorted(config.learners)
            if learners:
                self.goal = ("remove", learners[0])
            elif len(voters) <= self.profile.nodes and rng.random() < 0.7:
                self.goal = (rng.choice(("add", "add", "learner")), self._host_to_add())
            elif len(voters) > max(2, self.profile.nodes - 1):
                self.goal = ("remove", rng.choice(voters))
            else:
                return
        kind, target = self.goal
        committed = node.commit >= node.configuration_index
        if kind == "remove":
            if target not in config.members:
                if committed:
                    self._retire(target)
                    self.goal = None
                return
            self._change(leader, ConfigChange(ConfigChangeOp.REMOVE, target))
        elif target in config.voters:
            self.goal = None
        elif target in config.learners:
            if kind == "learner":
                self.goal = ("remove", target)
            elif node.is_caught_up(target):
                self._change(leader, ConfigChange(ConfigChangeOp.PROMOTE, target))
        else:
            self._change(leader, ConfigChange(ConfigChangeOp.ADD_LEARNER, target))

    def _change(self, leader: SimHost, change: ConfigChange) -> None:
        try:
            leader.run(lambda node: node.change_config(change), self.now)
        except RaftError:
            return
        self.stats["config_changes"] += 1

    def _host_to_add(self) -> NodeId:
        """A new node, or (half the time, when there is one) a node that was removed and
        deleted its log: it comes back with only its term and vote."""
        if self.collected and self.rng.random() < 0.5:
            node_id = self.rng.choice(sorted(self.collected))
            self._revive(node_id)
            return node_id
        return self._new_host()

    def _revive(self, node_id: NodeId) -> None:
        self.collected.discard(node_id)
        host = self.hosts[node_id]
        host.start()
        host.process_ready(self.now)

    def _new_host(self) -> NodeId:
        node_id = f"n{self._next_id}"
        self._next_id += 1
        self._add_host(node_id, Configuration())
        return node_id

    def _add_host(self, node_id: NodeId, bootstrap: Configuration) -> None:
        self.hosts[node_id] = SimHost(
            node_id,
            bootstrap,
            self.profile.raft,
            random.Random(self.rng.getrandbits(64)),
            self.checker,
            self.send,
            self.stats,
            self.hosts,
            parallel_rate=self.profile.parallel_rate,
            pivot_crash_rate=self.profile.pivot_crash_rate,
            on_crash=self._crashed,
            on_collect=self._collected,
            faults=self.faults,
            disk=self.profile.disk,
            flip_rate=self.profile.flip_rate if node_id == self._flip_host else 0.0,
            io_error_rate=self.profile.io_error_rate,
            io_errors=not self.calm,
        )

    def _retire(self, node_id: NodeId) -> None:
        """A removed member is shut down for good, as an operator would decommission it — or,
        half the time, left running: it then hears of its removal (from the leader, or from a
        member when it campaigns) and deletes its log (`SimHost.collect`)."""
        if node_id in self.collected or self.rng.random() < 0.5:
            return
        host = self.hosts[node_id]
        if host.up:
            host.crash()
        self.retired.add(node_id)
        self.down_until.pop(node_id, None)

    def _collected(self, host: SimHost) -> None:
        self.stats["collections"] += 1
        self.collected.add(host.id)
        self.down_until.pop(host.id, None)
        self.checker.after_crash({i: h.log for i, h in self.hosts.items() if i not in self.retired})

    def _compact(self) -> None:
        live = self._live_hosts()
        if not live:
            return
        host = self.rng.choice(live)
        node = host.node
        assert node is not None
        log = host.log
        high = min(node.applied_index, log.last_index) + 1
        if high > log.first_index:
            host.compact(self.rng.randint(log.first_index, high))

    # -- queries ---------------------------------------------------------------------------------------
    def _live_hosts(self) -> list[SimHost]:
        return [h for _, h in sorted(self.hosts.items()) if h.node is not None]

    def _leader(self) -> SimHost | None:
        best: SimHost | None = None
        best_term = -1
        for host in self._live_hosts():
            node = host.node
            assert node is not None
            if node.role is Role.LEADER and node.term > best_term:
                best, best_term = host, node.term
        return best


@dataclass(slots=True)
class _Proposal:
    data: bytes
    first_tick: int
    term: int = -1  # the term of the leader that last accepted it


def _tick(node: RaftNode) -> None:
    # as a MultiRaft host ticks: a quiet tick (it only counts) is passed, not ticked
    if node.quiet_ticks():
        node.pass_ticks(1)
    else:
        node.tick()


def _quiesce(node: RaftNode) -> None:
    node.quiesce()


def _step(message: Message, node: RaftNode) -> None:
    node.step(message)


def _round_trip(message: Message) -> Message:
    decoded = decode_message(encode_message(message))
    if decoded != message:
        raise Violation("codec", f"{message!r} decoded as {decoded!r}")
    return decoded
