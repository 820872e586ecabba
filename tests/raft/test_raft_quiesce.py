"""Quiescence (issue 28): an idle group's leader puts the group to sleep and any input wakes it;
a lagging member keeps it awake, a member silent for a whole check-quorum window does not; a
restarted member asking who leads is told without waking the group. On the `group` harness
(conftest.py)."""

from __future__ import annotations

from raft.config import RaftConfig
from raft.types import Role, VoteRequest

ABC = ("a", "b", "c")
E = RaftConfig().election_ticks


def test_quiesce_and_wake(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.tick(1)
    assert g.run("a", lambda n: n.quiesce()) is True
    g.deliver()
    assert a.quiesced and all(n.quiesced for n in g.nodes.values())
    assert a.lease_read_index() is None
    assert not any(n.has_ready() for n in g.nodes.values())
    g.run("a", lambda n: n.propose(b"wake", 1))
    assert not a.quiesced
    g.deliver()
    assert not g.nodes["b"].quiesced and a.commit == 2
    g.nodes["c"].wake()
    assert not g.nodes["c"].quiesced


def test_quiesce_refused_while_a_follower_lags(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("c")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    assert a.quiesce() is False
    assert g.nodes["b"].quiesce() is False


def test_a_leader_quiesces_past_a_silent_member_and_wakes_when_it_is_back(group) -> None:  # type: ignore[no-untyped-def]
    """A member down (or cut off) for a whole check-quorum window does not keep its group awake,
    heartbeating into the void: the leader quiesces with the live members and sends the silent
    one nothing (a quiescing heartbeat would put a member that lacks entries to sleep for ever).
    Back, its election timer runs; its pre-vote wakes the leader, which sends it what it
    missed, and nobody is unseated."""
    g = group(ABC)
    a = g.elect("a")
    g.isolate("c")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    assert a.quiesce() is False  # c answered within this window: a live member that lags
    g.tick(E, only=["a", "b"])  # a new window, and c answered in the last one
    assert a.quiesce() is False
    g.tick(E, only=["a", "b"])  # c silent for a whole window
    g.sent.clear()
    assert g.run("a", lambda n: n.quiesce()) is True
    g.deliver()
    assert a.quiesced and g.nodes["b"].quiesced
    assert [m.recipient for m in g.sent if m.sender == "a"] == ["b"]
    term, c = a.term, g.nodes["c"]
    assert c.log.last_index < a.log.last_index and not c.quiesced
    g.heal()
    g.tick(3 * E, only=["c"])
    assert not a.quiesced  # c's pre-vote woke it
    g.tick(3 * g.config.heartbeat_ticks, only=["a"])
    assert c.log.last_index == a.log.last_index and c.commit == a.commit
    assert a.role is Role.LEADER and a.term == term and c.leader_id == "a"


def test_a_restarted_follower_asking_who_leads_is_told_and_the_group_sleeps_on(group) -> None:  # type: ignore[no-untyped-def]
    """A follower restarted with its whole log asks who leads (`probe_membership`, as a node's
    opener does for each replica at a restart): its quiesced leader tells it alone with a
    quiescing heartbeat and sleeps on, so a node restarted with thousands of replicas does not
    wake thousands of groups. A follower behind the leader's log still wakes it."""
    g = group(ABC)
    a = g.elect("a")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    g.tick(1)
    assert g.run("a", lambda n: n.quiesce()) is True
    g.deliver()
    assert all(n.quiesced for n in g.nodes.values())
    c = g.restart("c")
    assert c.leader_id is None and not c.quiesced
    g.sent.clear()
    g.run("c", lambda n: n.probe_membership())
    g.deliver()
    assert a.quiesced and g.nodes["b"].quiesced
    assert c.leader_id == "a" and c.term == a.term and c.quiesced
    assert c.commit == a.commit == a.log.last_index
    # b answered the probe (no) and slept on; a told c alone
    assert [type(m).__name__ for m in g.sent if m.sender == "b"] == ["VoteResponse"]
    assert [type(m).__name__ for m in g.sent if m.sender == "a"] == ["Heartbeat"]
    # a member whose log ends short of the leader's (it lost a tail) wakes it, as before
    last = a.log.last_index
    a.step(VoteRequest(c.term, "c", "a", last - 1, a.log.term(last - 1), pre_vote=True))
    assert not a.quiesced
