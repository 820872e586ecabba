"""Quiet ticks (issue 28): `pass_ticks(n)` for n <= `quiet_ticks()` is exactly n `tick()`s, so
a MultiRaft host may tick only the groups whose timer is due. Checked against `tick()` on every
node after every input of random runs (elections, partitions, crashes, proposals)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import RaftConfigError
from raft.progress import Progress
from raft.types import Role

ABC = ("a", "b", "c")
E = RaftConfig().election_ticks


def _plain(value: object) -> object:
    if isinstance(value, Progress):
        return {name: getattr(value, name) for name in Progress.__slots__}
    if isinstance(value, dict):
        return {key: _plain(each) for key, each in value.items()}
    return value


def _state(node: RaftNode) -> dict[str, Any]:
    """Everything the node holds, comparable by value (the log by what it answers)."""
    skip = {"log", "_rng", "config", "_faults"}
    state = {name: _plain(getattr(node, name)) for name in RaftNode.__slots__ if name not in skip}
    state["log"] = (node.log.offset, list(node.log.unstable), node.log.last_index)
    state["rng"] = node._rng.getstate()
    return state


def _check_quiet(node: RaftNode) -> int:
    """`pass_ticks(quiet_ticks())` leaves the node as that many `tick()`s do, and none of those
    ticks carries `ticks_without_leader` across an election timeout. Returns the quiet ticks."""
    quiet = node.quiet_ticks()
    ticked, passed = copy.deepcopy(node), copy.deepcopy(node)
    silent_before = node.ticks_without_leader >= E
    for tick in range(quiet):
        ticked.tick()
        assert (ticked.ticks_without_leader >= E) == silent_before, (
            f"{node.id}: tick {tick + 1} of {quiet} quiet ones crossed an election timeout "
            f"without a leader"
        )
    passed.pass_ticks(quiet)
    assert _state(passed) == _state(ticked), f"{node.id}: {quiet} quiet ticks differ from tick()"
    return quiet


@pytest.mark.parametrize("seed", range(6))
def test_passing_the_quiet_ticks_is_ticking_them(group, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    g = group(ABC, seed=seed, config=RaftConfig(pre_vote=bool(seed % 2)))
    for node_id in ("b", "c"):  # as a host does for a new group's other replicas
        g.nodes[node_id].defer_campaign(rng.randrange(2 * E))
    quiet_seen = 0
    for _ in range(200):
        roll = rng.random()
        if roll < 0.6:
            g.tick(1)
        elif roll < 0.7:
            leaders = g.leaders()
            if leaders:
                g.run(leaders[0], lambda n: n.propose(b"x", 1))
        elif roll < 0.78:
            g.isolate(rng.choice(ABC))
        elif roll < 0.86:
            g.heal()
        elif roll < 0.9:
            down = [n for n in ABC if n not in g.nodes]
            if down:
                g.start(down[0], g.boots[down[0]])
            elif len(g.nodes) == 3:
                g.crash(rng.choice(ABC))
        elif roll < 0.95:
            leaders = g.leaders()
            if leaders:
                g.run(leaders[0], lambda n: n.quiesce())
        else:
            node = g.nodes.get(rng.choice(ABC))
            if node is not None:
                node.hasten_campaign()
        for node in g.nodes.values():
            quiet_seen += _check_quiet(node)
    assert quiet_seen > 0, "no quiet tick in the whole run: the check checked nothing"


def test_leaders_and_quiesced_nodes_have_no_quiet_ticks(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    leader = g.elect("a")
    g.tick(2)
    assert leader.quiet_ticks() == 0
    follower = g.nodes["b"]
    # heard from its leader just now: quiet until an election timeout without it comes near
    assert 0 < follower.quiet_ticks() < E
    for _ in range(3 * E):
        if g.run("a", lambda n: n.quiesce()):
            break
        g.tick(1)
    g.deliver()
    assert leader.quiesced and follower.quiesced
    assert leader.quiet_ticks() == 0 and follower.quiet_ticks() == 0  # a tick would wake them


def test_passing_more_than_the_quiet_ticks_is_refused(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    node = g.nodes["b"]
    quiet = node.quiet_ticks()
    before = _state(node)
    with pytest.raises(RaftConfigError, match=rf"pass_ticks\({quiet + 1}\): only 0..{quiet}"):
        node.pass_ticks(quiet + 1)
    with pytest.raises(RaftConfigError, match=r"pass_ticks\(-1\)"):
        node.pass_ticks(-1)
    assert _state(node) == before
    # a follower that will campaign at the next tick has none
    node.hasten_campaign()
    assert node.quiet_ticks() == 0 and node.role is Role.FOLLOWER
