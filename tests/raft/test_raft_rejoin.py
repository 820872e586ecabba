"""A replica removed from its group, retired (log deleted, term and vote kept) and added back must
never lend a stale member the vote of the log it deleted (issue 21, item 1)."""

from __future__ import annotations

import pytest

from raft.config import RaftConfig
from raft.faults import RaftFaults
from raft.sim.checker import Violation
from raft.types import (
    AppendRequest,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    LogReset,
    Message,
    Role,
)

SXY = ("s", "x", "y")
E = RaftConfig().election_ticks


def _change(g, op: ConfigChangeOp, target: str) -> None:  # type: ignore[no-untyped-def]
    g.run("y", lambda n: n.change_config(ConfigChange(op, target)))
    g.deliver()
    g.tick(2, only=["y"])


def _re_added(g, *, elected: bool = False):  # type: ignore[no-untyped-def]
    """The issue's scenario up to the partition: s is cut off; y commits three entries with x;
    l is added and promoted; x is removed (and retires) and added back as a learner, cut off
    from y and l before it hears a word from them."""
    y = g.nodes["y"] if elected else g.elect("y")
    g.tick(2)
    g.isolate("s")
    base = y.commit
    for i in range(3):
        g.run("y", lambda n, i=i: n.propose(b"acked-%d" % i, 1))
    g.deliver()
    committed = y.commit
    assert committed == base + 3 and g.nodes["x"].log.last_index == committed
    g.add("l")
    _change(g, ConfigChangeOp.ADD_LEARNER, "l")
    g.tick(2, only=["y", "l"])
    _change(g, ConfigChangeOp.PROMOTE, "l")
    _change(g, ConfigChangeOp.REMOVE, "x")
    assert y.configuration == Configuration(frozenset({"s", "y", "l"}))
    assert g.nodes["x"].removed_at == y.configuration_index  # told once the removal committed
    g.retire("x")
    g.heal()
    g.split(["s", "x"], ["y", "l"])
    _change(g, ConfigChangeOp.ADD_LEARNER, "x")
    assert y.configuration.learners == {"x"} and y.commit == y.log.last_index
    return y, committed


def test_a_re_added_replica_does_not_elect_a_stale_member(group) -> None:  # type: ignore[no-untyped-def]
    """On the old code s (configuration {s, x, y}, log without the three acknowledged entries)
    won term 2 with the vote of the wiped x while y still led term 1 with l (the checker:
    "leader-completeness: s leads term 2 but its log has term 2 at index 2, where term 1 was
    committed")."""
    g = group(SXY)
    y, committed = _re_added(g)
    s, x = g.nodes["s"], g.nodes["x"]
    for _ in range(6 * E):
        g.tick(1, only=["s", "x"])
        g.tick(1, only=["y", "l"])
        assert s.role is not Role.LEADER, f"s won term {s.term} with x's vote"
    assert y.role is Role.LEADER and y.term == 1
    g.run("y", lambda n: n.propose(b"after", 1))
    g.deliver()
    assert y.commit > committed
    # once the partition heals, x and s catch up, and the acknowledged entries stand
    g.heal()
    g.tick(3 * E)
    leader = g.nodes[g.leaders()[0]]
    assert g.leaders() == [leader.id]
    assert x.log.last_index == leader.log.last_index and s.log.last_index == leader.log.last_index
    for index in range(2, committed + 1):
        assert g.checker.committed[index][1] == b"acked-%d" % (index - 2)


def test_a_re_added_replica_part_way_through_its_catch_up_still_refuses(group) -> None:  # type: ignore[no-untyped-def]
    """Catching up, x's log first holds the configurations of its earlier membership. Here the
    group's configuration {s, x, y} was set by an entry (z added and removed) before s was cut
    off, so x, having received the log up to there and restarted, holds a configuration that
    names it a voter and a log exactly as up to date as s's: a rule "vote while a configuration
    in your own log names you" would let it elect s again."""
    g = group(SXY, config=RaftConfig(max_msg_bytes=1))  # one entry per message
    y = g.elect("y")
    g.tick(2)
    _change(g, ConfigChangeOp.ADD_LEARNER, "z")
    _change(g, ConfigChangeOp.REMOVE, "z")
    g.tick(2)
    s = g.nodes["s"]
    prefix = y.log.last_index
    assert s.log.last_index == prefix and s.configuration_index == prefix
    y, committed = _re_added(g, elected=True)
    g.heal()
    g.split(["s"], ["x", "y", "l"])

    def beyond_prefix(m: Message) -> bool:
        if m.recipient != "x":
            return False
        if isinstance(m, AppendRequest):
            return any(e.index > prefix for e in m.entries)
        return isinstance(m, LogReset)

    x = g.nodes["x"]
    for _ in range(8 * E):
        for node_id in ("y", "l"):
            g.nodes[node_id].tick()
            g.drain(node_id)
        g.deliver(keep=beyond_prefix)
        if x.log.last_index >= prefix:
            break
    assert x.log.last_index == prefix and x.configuration.voters == {"s", "x", "y"}
    g.queue.clear()
    x = g.restart("x")
    assert x.configuration.voters == {"s", "x", "y"}
    g.heal()
    g.split(["s", "x"], ["y", "l"])
    for _ in range(6 * E):
        g.tick(1, only=["s", "x"])
        assert s.role is not Role.LEADER, f"s won term {s.term} with x's vote"
        assert x.role is not Role.LEADER, f"x won term {x.term} with s's vote"
    assert y.role is Role.LEADER and y.commit >= committed


def test_a_caught_up_re_added_replica_votes_again(group) -> None:  # type: ignore[no-untyped-def]
    """Liveness: once x holds a log as up to date as the one it deleted, it votes as before —
    here its vote is needed to elect anyone after y stops."""
    g = group(SXY)
    y, _ = _re_added(g)
    g.heal()
    g.tick(3 * E)
    assert y.is_caught_up("x")
    _change(g, ConfigChangeOp.PROMOTE, "x")
    _change(g, ConfigChangeOp.REMOVE, "s")
    assert y.configuration == Configuration(frozenset({"x", "y", "l"}))
    g.tick(2)
    del g.nodes["y"]  # y stops for good: l needs x's vote, and x l's
    g.tick(6 * E)
    assert g.leaders() in (["l"], ["x"])


def test_the_scenarios_catch_a_replica_that_votes_blind_after_re_joining(group) -> None:  # type: ignore[no-untyped-def]
    """Mutation check: with the vote floor ignored (the old vote granting), both scenarios
    elect s, and the checker sees it lead without the entries y committed with x."""
    blind = RaftFaults(rejoined_votes_blind=True)
    with pytest.raises(Violation, match=r"leader-completeness|state-machine-safety"):
        test_a_re_added_replica_does_not_elect_a_stale_member(
            lambda *a, **k: group(*a, faults=blind, **k)
        )
    with pytest.raises(Violation, match=r"leader-completeness|state-machine-safety"):
        test_a_re_added_replica_part_way_through_its_catch_up_still_refuses(
            lambda *a, **k: group(*a, faults=blind, **k)
        )


def test_a_member_that_lost_its_acknowledged_log_is_sent_it_again(group) -> None:  # type: ignore[no-untyped-def]
    """A re-added replica part-way through its catch-up holds an older configuration than the
    one that removed it, so a late `Removed` (a duplicate of the leader's, or a lagging member's
    answer) makes it retire again while the leader still counts what it acknowledged. Found by
    the churn nemesis (seed 1421, 5 nodes): the leader answered each rejection at its old
    `match_index` by sending the same append again, a storm that never caught the replica up."""
    g = group(("a", "b", "c"))
    a = g.elect("a")
    for i in range(3):
        g.run("a", lambda n, i=i: n.propose(b"%d" % i, 1))
    g.deliver()
    g.add("x")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "x")))
    g.deliver()
    g.tick(2)
    assert a.match_index("x") == a.log.last_index
    g.retire("x")  # its log is gone; the leader still counts it at match_index
    g.sent.clear()
    g.run("a", lambda n: n.propose(b"next", 1))  # the append that x rejects
    g.tick(3)
    to_x = [m for m in g.sent if isinstance(m, AppendRequest) and m.recipient == "x"]
    assert len(to_x) < 20, f"{len(to_x)} appends to x in 3 ticks"
    assert g.nodes["x"].log.last_index == a.log.last_index
    assert a.match_index("x") == a.log.last_index
