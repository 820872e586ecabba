"""A replica whose log was found damaged is rebuilt from its peers (issue 21, item 2): its host
opens it with an empty log, an empty configuration and a vote floor at the end of the damaged
log (`cluster.opener`). Its group's leader still counts the entries it acknowledged before; it
must learn that they are gone and send them again, quiesced or not."""

from __future__ import annotations

from typing import Any

from raft.core import RaftNode
from raft.log import MemoryLog
from raft.types import HardState, LogPosition, Role

ABC = ("a", "b", "c")


def _damage(g: Any, node_id: str) -> None:
    """What the host does with a replica whose log recovery found damaged: an empty log, its
    term, vote and configuration as before, and the vote floor."""
    g.floors[node_id] = g.nodes.pop(node_id).vote_floor
    kept = g.hard[node_id]
    g.logs[node_id] = MemoryLog()
    g.hard[node_id] = HardState(kept.term, kept.vote, kept.commit)
    g.start(node_id, g.boots[node_id])


def _written(g: Any) -> RaftNode:
    a: RaftNode = g.elect("a")
    for i in range(5):
        g.run("a", lambda n, i=i: n.propose(b"acked-%d" % i, 1))
    g.deliver()
    assert g.nodes["c"].log.last_index == a.log.last_index == a.commit
    return a


def _same_log(g: Any, x: str, y: str) -> bool:
    one, other = g.logs[x], g.logs[y]
    if one.last_index != other.last_index:
        return False
    return [(e.term, bytes(e.data)) for e in one.entries(1, one.last_index + 1, 1 << 62)] == [
        (e.term, bytes(e.data)) for e in other.entries(1, other.last_index + 1, 1 << 62)
    ]


def test_a_leader_sends_a_damaged_follower_its_log_again(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = _written(g)
    end = LogPosition(a.log.last_term, a.log.last_index)
    _damage(g, "c")
    c = g.nodes["c"]
    assert c.log.last_index == 0 and c.vote_floor == end
    g.tick(3 * g.config.heartbeat_ticks, only=["a"])  # heartbeats: their commit says it lacks
    assert _same_log(g, "a", "c"), (c.log.last_index, a.log.last_index)
    assert c.commit == a.commit
    assert a.role is Role.LEADER and g.leaders() == ["a"]
    # caught up, it may lead again (an empty configuration would bar it for good here: this
    # group's log holds no configuration entry)
    g.run("a", lambda n: n.transfer_leader("c"))
    g.deliver()
    g.tick(2)
    assert g.leaders() == ["c"]


def test_below_its_floor_a_damaged_follower_neither_campaigns_nor_votes_for_less(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = _written(g)
    _damage(g, "c")
    g.isolate("a")  # the leader is gone before c hears from it
    c = g.nodes["c"]
    g.tick(10 * g.config.election_ticks, only=["c"])
    assert c.role is Role.FOLLOWER and c.term == a.term  # never campaigned
    assert g.nodes["b"].log.last_index == a.log.last_index
    b = g.elect("b")  # b holds the whole log: c's vote elects it
    assert b.role is Role.LEADER
    g.tick(3 * g.config.heartbeat_ticks, only=["b"])
    assert _same_log(g, "b", "c")


def test_a_damaged_follower_wakes_its_quiesced_leader(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = _written(g)
    g.tick(2)
    assert g.run("a", lambda n: n.quiesce())
    g.deliver()
    assert a.quiesced
    _damage(g, "c")
    # with an empty configuration it never campaigns: it asks the topic's assigned replicas
    g.run("c", lambda n: n.probe_membership(["a", "b"]))
    g.deliver()
    assert not a.quiesced
    g.tick(3 * g.config.heartbeat_ticks, only=["a"])
    assert _same_log(g, "a", "c")
