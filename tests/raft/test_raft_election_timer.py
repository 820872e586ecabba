"""The election timer: when a follower campaigns. It restarts on hearing the leader or granting
a vote, not on a higher term alone (Raft, Figure 2), and a host's campaign deferral
(`defer_campaign`) delays one election only."""

from __future__ import annotations

import pytest

from raft.config import RaftConfig
from raft.errors import RaftConfigError
from raft.types import Role, VoteRequest

ABC = ("a", "b", "c")
E = RaftConfig().election_ticks


@pytest.mark.parametrize("seed", range(20))
def test_deferred_members_let_the_preferred_one_win_the_first_election(group, seed) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC, seed=seed)
    for other in ("b", "c"):
        g.nodes[other].defer_campaign(2 * E)
    for _ in range(3 * E):  # everyone ticks in lockstep: no split votes, one election
        g.tick(1)
        if g.leaders():
            break
    assert g.leaders() == ["a"] and g.nodes["a"].term == 1
    assert all(not (isinstance(m, VoteRequest) and m.sender != "a") for m in g.sent), (
        "a deferred member campaigned"
    )


def test_deferred_members_still_elect_without_the_preferred_one(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    for other in ("b", "c"):
        g.nodes[other].defer_campaign(2 * E)
    g.isolate("a")
    g.tick(3 * E + 1, only=("b", "c"))
    assert g.leaders() in (["b"], ["c"])
    with pytest.raises(RaftConfigError, match="ticks must be >= 0"):
        g.nodes["a"].defer_campaign(-1)


def test_refusing_a_stale_candidate_keeps_the_election_timer(group) -> None:  # type: ignore[no-untyped-def]
    # Raft, Figure 2: a follower's election timer restarts on hearing from the leader or on
    # granting a vote. A refused candidate with a stale log only raises the term; restarting
    # the timer then let stale members (without pre-vote) keep the only electable ones from
    # ever timing out first (simulator seeds 4667 and 6972: no leader after a heal).
    g = group(ABC, config=RaftConfig(pre_vote=False, check_quorum=False))
    g.elect("a")
    g.isolate("c")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    g.crash("a")
    b, c = g.nodes["b"], g.nodes["c"]
    assert b.log.last_index > c.log.last_index
    timeout = b._randomized_timeout
    g.tick(timeout - 2, only=["b"])
    assert b.role is Role.FOLLOWER
    stale = VoteRequest(b.term + 1, "c", "b", c.log.last_index, c.log.last_term)
    g.run("b", lambda n: n.step(stale))
    assert b.term == stale.term and b.vote is None  # refused, at the candidate's term
    g.tick(2, only=["b"])
    # it campaigns on its own schedule, as if the stale candidate had never asked
    assert (b.role, b.term) == (Role.CANDIDATE, stale.term + 1)


def test_a_deferral_ends_with_the_election_it_was_for(group) -> None:  # type: ignore[no-untyped-def]
    """`defer_campaign` delays this election timeout only. A deferred member that grants the
    preferred one its vote (at the new term: its timer is kept, Figure 2) and follows it must,
    once that leader is gone, campaign within an ordinary timeout: a deferral kept past the
    election it was for left real nodes without a leader for three timeouts after a crash."""
    g = group(ABC, config=RaftConfig(pre_vote=False, check_quorum=False))
    for other in ("b", "c"):
        g.nodes[other].defer_campaign(2 * E)
    for _ in range(3 * E):
        g.tick(1)
        if g.leaders():
            break
    assert g.leaders() == ["a"]
    g.crash("a")
    g.tick(2 * E, only=("b", "c"))  # an ordinary timeout is drawn from [E, 2E)
    assert any(g.nodes[n].role is not Role.FOLLOWER or g.nodes[n].term > 1 for n in "bc")


def test_a_first_campaign_at_term_0_skips_the_pre_vote(group) -> None:  # type: ignore[no-untyped-def]
    """At term 0 no leader exists anywhere to protect (every leader's term is at least 1): a
    new group's first campaign is a real election at once, one round trip and two messages
    fewer per peer than a pre-vote first."""
    g = group(ABC)
    g.elect("a")
    requests = [m for m in g.sent if isinstance(m, VoteRequest)]
    assert requests and all(not m.pre_vote and m.term == 1 for m in requests), requests
    assert g.leaders() == ["a"] and g.nodes["a"].term == 1
    # later campaigns pre-vote as before
    g.isolate("c")
    g.tick(3 * E, only=["c"])
    assert g.nodes["c"].role is Role.PRE_CANDIDATE and g.nodes["c"].term == 1


def test_a_term_0_campaign_cannot_unseat_a_leader(group) -> None:  # type: ignore[no-untyped-def]
    """A member that slept through the first election (still at term 0) campaigns without a
    pre-vote: for term 1, which every member holding a leader already has, so it is refused
    and the leader stays."""
    g = group(ABC)
    g.isolate("c")
    g.elect("a")
    assert g.nodes["c"].term == 0
    g.heal()
    g.tick(3 * E, only=["c"])  # c's timer runs out before a's heartbeat reaches it
    assert g.leaders() == ["a"] and g.nodes["a"].term == 1
    assert g.nodes["c"].term == 1 and g.nodes["c"].leader_id in (None, "a")
    g.tick(2)
    assert g.nodes["c"].leader_id == "a" and g.nodes["a"].term == 1


def test_a_hastened_member_campaigns_at_its_next_tick(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.nodes["a"]
    a.defer_campaign(2 * E)
    a.hasten_campaign()  # ends the deferral too
    g.tick(1, only=["a"])
    assert g.leaders() == ["a"] and a.term == 1
    a.hasten_campaign()  # a leader: nothing to hasten
    g.tick(1, only=["a"])
    assert g.leaders() == ["a"] and a.term == 1
