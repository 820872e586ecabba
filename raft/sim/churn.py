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
4. re-add: X is revived (empty log, empty configuration) and added back as a learner, and at
   once the network becomes {S, X} | the rest, before X has caught up.

S's configuration still names X a voter and S lacks the entries X acknowledged: a group whose
wiped member votes as if it had never acknowledged anything elects S and loses them (issue 21).
The rest of the nemesis (crashes, drops, random partitions and heals) goes on meanwhile, so an
episode meets leader changes, lost messages and crashes of X mid catch-up too. An episode that
cannot make progress (no leader, a change that does not commit) is abandoned after
`_STAGE_TICKS` election timeouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raft.errors import RaftError
from raft.types import ConfigChange, ConfigChangeOp, NodeId

if TYPE_CHECKING:
    from raft.sim.cluster import Simulation
    from raft.sim.host import SimHost

__all__ = ["Churn"]

_STAGE_TICKS = 20  # election timeouts an episode's stage may take before it is abandoned
_PROPOSALS = (1, 4)  # proposals made while S is cut off (min, max)


class Churn:
    """One membership-churn episode at a time (see the module docstring)."""

    __slots__ = ("newcomer", "sim", "stage", "stage_deadline", "stale", "target")

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.stage: str | None = None
        self.stale: NodeId = ""
        self.target: NodeId = ""
        self.newcomer: NodeId = ""
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
        if self._change(leader, ConfigChangeOp.ADD_LEARNER, target):
            # before it hears a word from the leader: beside the stale member
            stale_side = [self.stale, target]
            sim.network.heal()
            sim.network.split(stale_side, [i for i in sorted(sim.hosts) if i not in stale_side])
            sim.stats["partitions"] += 1
            sim.stats["churns"] += 1
            self.abandon()

    def _change(self, leader: SimHost, op: ConfigChangeOp, target: NodeId) -> bool:
        try:
            leader.run(lambda node: node.change_config(ConfigChange(op, target)), self.sim.now)
        except RaftError:
            return False
        self.sim.stats["config_changes"] += 1
        return True
