"""The membership-churn nemesis: a member is removed, deletes its log (keeping its term and vote,
as `cluster` retires a replica), and is added back, while partitions put it beside a stale
member.

One episode, driven one step per tick of a chaos phase through the current leader:

1. isolate: a voter S (not the leader) is cut off, and a few proposals commit without it;
   another voter X (not the leader either) is among those that acknowledge them.
2. add: a fresh node (or one collected earlier) is added as a learner and promoted once caught up,
   so that the group keeps a quorum without X.
3. remove: X is removed; once the removal commits, X is told and collects itself (log deleted,
   term and vote kept: `SimHost.collect`).
4. re-add: X is revived (empty log, empty configuration) and added back as a learner, and the
   network becomes {S, X} | the rest before X has caught up: at once (half the episodes), or
   once a slow link (`Network.log_limit`) has let X receive the log up to the last
   configuration of its earlier membership in which S and X are voters and a quorum (X then
   sometimes crashes and restarts too): it then holds such a configuration and a log at least
   as up to date as S's.

S's configuration still names X a voter and S lacks the entries X acknowledged: a group whose
wiped member votes as if it had never acknowledged anything elects S and loses them (issue 21).
The rest of the nemesis but its partitions (crashes, drops, delays, transfers) goes on meanwhile,
so an episode meets leader changes, lost messages and crashes too; random partitions and heals
resume once the episode has placed its own. An episode that
cannot make progress (no leader, a change that does not commit) is abandoned after
`_STAGE_TICKS` election timeouts.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Protocol

from raft.codec import decode_config_entry
from raft.errors import RaftError
from raft.types import ConfigChange, ConfigChangeOp, EntryKind, NodeId

if TYPE_CHECKING:
    from raft.sim.host import SimHost
    from raft.sim.network import Network
    from raft.sim.profile import SimProfile

__all__ = ["Churn"]

_STAGE_TICKS = 20  # election timeouts an episode's stage may take before it is abandoned
_PROPOSALS = (1, 4)  # proposals made while S is cut off (min, max)


class Simulated(Protocol):
    """What an episode drives: the simulation (`raft.sim.cluster.Simulation`), named here
    rather than imported, so the simulation and its nemesis do not import each other."""

    profile: SimProfile
    goal: tuple[str, NodeId] | None
    rng: random.Random
    now: int
    retired: set[NodeId]
    collected: set[NodeId]
    network: Network
    hosts: dict[NodeId, SimHost]
    stats: dict[str, int]

    def _leader(self) -> SimHost | None: ...
    def _propose(self, host: SimHost, data: bytes) -> bool: ...
    def _new_data(self) -> bytes: ...
    def _host_to_add(self) -> NodeId: ...
    def _revive(self, node_id: NodeId) -> None: ...
    def _crash(self, host: SimHost | None) -> None: ...


class Churn:
    """One membership-churn episode at a time (see the module docstring)."""

    __slots__ = ("cut_at", "newcomer", "sim", "stage", "stage_deadline", "stale", "target")

    def __init__(self, sim: Simulated) -> None:
        self.sim = sim
        self.stage: str | None = None
        self.stale: NodeId = ""
        self.target: NodeId = ""
        self.newcomer: NodeId = ""
        self.cut_at = 0  # the index X's log reaches before the partition (0: at once)
        self.stage_deadline = 0

    @property
    def active(self) -> bool:
        return self.stage is not None

    def abandon(self) -> None:
        self.stage = None

    def step(self) -> None:
        sim = self.sim
        if self.stage is None:
            rate = sim.profile.churn_rate
            if rate and sim.goal is None and sim.rng.random() < rate:
                self._begin()
            return
        if sim.now > self.stage_deadline:
            self.abandon()
            return
        leader = sim._leader()
        if leader is None:
            return
        if self.stage == "add":
            self._add(leader)
        elif self.stage == "remove":
            self._remove(leader)
        elif self.stage == "re-add":
            self._re_add(leader)
        elif self.stage == "catch-up":
            self._catch_up()

    # -- the stages ---------------------------------------------------------------------------------
    def _begin(self) -> None:
        sim = self.sim
        leader = sim._leader()
        if leader is None or leader.node is None:
            return
        others = sorted(v for v in leader.node.configuration.voters if v != leader.id)
        others = [v for v in others if v not in sim.retired and v not in sim.collected]
        if len(others) < 2:
            return
        self.stale, self.target = sim.rng.sample(others, 2)
        sim.network.heal()
        sim.network.split([self.stale], [i for i in sorted(sim.hosts) if i != self.stale])
        sim.stats["partitions"] += 1
        for _ in range(sim.rng.randint(*_PROPOSALS)):
            sim._propose(leader, sim._new_data())
        self.newcomer = sim._host_to_add()
        self._enter("add")

    def _enter(self, stage: str) -> None:
        self.stage = stage
        self.stage_deadline = self.sim.now + _STAGE_TICKS * self.sim.profile.raft.election_ticks

    def _add(self, leader: SimHost) -> None:
        node = leader.node
        assert node is not None
        newcomer = self.newcomer
        config = node.configuration
        if newcomer in config.voters:
            if node.commit >= node.configuration_index:
                self._enter("remove")
        elif newcomer in config.learners:
            if node.is_caught_up(newcomer):
                self._change(leader, ConfigChangeOp.PROMOTE, newcomer)
        else:
            self._change(leader, ConfigChangeOp.ADD_LEARNER, newcomer)

    def _remove(self, leader: SimHost) -> None:
        node = leader.node
        assert node is not None
        sim = self.sim
        target = self.target
        if target in node.configuration.members:
            self._change(leader, ConfigChangeOp.REMOVE, target)
            return
        if node.commit < node.configuration_index:
            return
        host = sim.hosts[target]
        if target not in sim.collected:
            host.collect()  # as if told `Removed` at once: log deleted, term and vote kept
        self._enter("re-add")

    def _re_add(self, leader: SimHost) -> None:
        node = leader.node
        assert node is not None
        sim = self.sim
        target = self.target
        if target in node.configuration.members:
            return
        if target in sim.collected:
            sim._revive(target)
        if not self._change(leader, ConfigChangeOp.ADD_LEARNER, target):
            return
        sim.stats["churns"] += 1
        if sim.rng.random() < 0.5:
            self._cut()  # before it hears a word from the leader
            return
        self.cut_at = _last_config_naming(leader, (self.stale, target)) or sim.rng.randint(
            1, max(1, node.commit)
        )
        sim.network.heal()  # let X catch up, part of the way; S stays cut off
        sim.network.split([self.stale], [i for i in sorted(sim.hosts) if i != self.stale])
        sim.network.log_limit[target] = self.cut_at
        self._enter("catch-up")

    def _catch_up(self) -> None:
        sim = self.sim
        host = sim.hosts[self.target]
        if host.node is None or host.log.last_index < self.cut_at:
            return
        self._cut()
        if sim.rng.random() < 0.3:
            sim._crash(host)

    def _cut(self) -> None:
        """{S, X} | the rest: X beside the stale member."""
        sim = self.sim
        stale_side = [self.stale, self.target]
        sim.network.heal()
        sim.network.split(stale_side, [i for i in sorted(sim.hosts) if i not in stale_side])
        sim.stats["partitions"] += 1
        self.abandon()

    def _change(self, leader: SimHost, op: ConfigChangeOp, target: NodeId) -> bool:
        try:
            leader.run(lambda node: node.change_config(ConfigChange(op, target)), self.sim.now)
        except RaftError:
            return False
        self.sim.stats["config_changes"] += 1
        return True


def _last_config_naming(leader: SimHost, side: tuple[NodeId, NodeId]) -> int:
    """The index of the last configuration entry in the leader's log in which the two nodes of
    `side` are voters and a quorum (0: none left in the log)."""
    log = leader.log
    entries = log.entries(log.first_index, log.last_index + 1, 1 << 62)
    for entry in reversed(entries):
        if entry.kind is EntryKind.CONFIG:
            config = decode_config_entry(entry.data)[1]
            if set(side) <= config.voters and config.quorum <= 2:
                return entry.index
    return 0
