"""Scripted scenarios for each rule of the Raft core, on the `group` harness (conftest.py)."""

from __future__ import annotations

import pytest

from raft.config import RaftConfig
from raft.core import RaftNode
from raft.errors import (
    ConfigChangeRejected,
    InvalidProposal,
    NotLeader,
    ProposalDropped,
    RaftConfigError,
    TransferRejected,
)
from raft.faults import RaftFaults
from raft.progress import ProgressState
from raft.sim.checker import Violation
from raft.types import (
    AppendRequest,
    ConfigChange,
    ConfigChangeOp,
    Configuration,
    HeartbeatResponse,
    LogReset,
    Removed,
    Role,
    TimeoutNow,
    VoteRequest,
)

ABC = ("a", "b", "c")
E = RaftConfig().election_ticks


def test_election_commits_a_noop_and_followers_learn_the_leader(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    leader = g.elect("a")
    g.tick(2)
    assert g.leaders() == ["a"]
    assert leader.term == 1 and leader.commit == 1
    assert all(n.leader_id == "a" and n.commit == 1 for n in g.nodes.values())
    assert g.logs["b"].entries(1, 2, 1 << 20)[0].kind.name == "NOOP"


def test_propose_replicates_and_commits_and_ready_reports_the_range(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    leader = g.elect("a")
    index = g.run("a", lambda n: n.propose(b"batch", 3))
    g.deliver()
    assert index == 2 and leader.commit == 2
    g.tick(1)
    assert g.nodes["b"].commit == 2 and g.nodes["b"].applied_index == 2
    assert g.checker.committed[2] == (1, b"batch")
    assert not leader.has_ready()


def test_propose_errors(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    with pytest.raises(NotLeader) as info:
        g.nodes["b"].propose(b"x", 1)
    assert info.value.leader_hint == "a"
    with pytest.raises(InvalidProposal):
        g.nodes["a"].propose(b"x", 0)


def test_pre_vote_keeps_a_partitioned_node_from_raising_the_term(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    g.isolate("c")
    g.tick(10 * E, only=["c"])
    assert g.nodes["c"].term == 1 and g.nodes["c"].role is Role.PRE_CANDIDATE
    g.heal()
    g.tick(3)
    assert g.leaders() == ["a"] and g.nodes["a"].term == 1


def test_without_pre_vote_a_partitioned_node_disrupts_on_return(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC, config=RaftConfig(pre_vote=False, check_quorum=False))
    g.elect("a")
    g.isolate("c")
    g.tick(5 * E, only=["c"])
    assert g.nodes["c"].term > 2
    g.heal()
    g.tick(1)
    assert g.nodes["a"].term == g.nodes["c"].term  # the leader was deposed: why PreVote exists


def test_check_quorum_leader_steps_down_when_cut_off(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    leader = g.elect("a")
    g.isolate("a")
    g.tick(2 * E, only=["a"])
    assert leader.role is Role.FOLLOWER and leader.leader_id is None
    assert leader.lease_read_index() is None


def test_a_cut_off_follower_counts_the_ticks_since_it_heard_a_leader(group) -> None:  # type: ignore[no-untyped-def]
    """`ticks_without_leader`: what a host asks before serving a follower's tail (0 for a
    leader; a follower's grow with its ticks until a leader's message reaches it)."""
    g = group(ABC)
    g.elect("a")
    g.tick(3 * E)
    assert [g.nodes[n].ticks_without_leader < E for n in ABC] == [True] * 3
    assert g.nodes["a"].ticks_without_leader == 0
    g.isolate("c")
    g.tick(E + 1)
    assert g.nodes["c"].ticks_without_leader >= E + 1
    assert g.nodes["b"].ticks_without_leader < E
    g.heal()
    g.tick(3)
    assert g.nodes["c"].ticks_without_leader < E


def test_a_new_member_is_not_counted_out_of_touch_before_an_election_timeout(group) -> None:  # type: ignore[no-untyped-def]
    """A member of a new group (durable term 0) may vote at once (`_in_lease` counts it as
    never having heard a leader), but it is not yet out of touch: `ticks_without_leader`
    counts its ticks from its start, so a read at its tail waits for the group's first leader
    instead of being refused as if cut off (it was refused at its first tick)."""
    g = group(ABC)
    node = g.nodes["c"]
    assert node.term == 0
    assert node.ticks_without_leader == 0
    g.tick(E - 1, only=["c"])
    assert node.ticks_without_leader == E - 1
    assert node.quiet_ticks() == 0 or node.ticks_without_leader + node.quiet_ticks() < E
    g.tick(1, only=["c"])
    assert node.ticks_without_leader == E  # out of touch from here on
    # the vote stays as it was: a new member grants its vote at once
    g.elect("a")
    assert g.nodes["a"].role is Role.LEADER


def test_lease_read_index_needs_quorum_acknowledged_heartbeats(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    leader = g.elect("a")
    assert leader.lease_read_index() is None  # no heartbeat answered yet
    g.tick(1)
    assert leader.lease_read_index() == leader.commit == 1
    assert g.nodes["b"].lease_read_index() is None
    g.isolate("a")
    expired_after = None
    for tick in range(1, 2 * E + 1):
        g.tick(1, only=["a"])
        if leader.lease_read_index() is None:
            expired_after = tick
            break
    # the lease ends before any follower could vote for someone else (E ticks), and well
    # before CheckQuorum makes the leader step down (up to 2 E)
    assert expired_after is not None and expired_after <= E - 2
    assert leader.role is Role.LEADER


def test_lease_is_void_once_a_transfer_begins(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.isolate("c")
    leader = g.elect("a")
    g.tick(1)
    assert leader.lease_read_index() is not None
    g.run("a", lambda n: n.transfer_leader("c"))  # c is unreachable: the transfer will abort
    g.tick(E + 1, only=["a", "b"])
    assert leader.transferee is None and leader.role is Role.LEADER
    assert leader.lease_read_index() is None  # TimeoutNow may still be on its way


def test_a_restarted_node_keeps_its_lease_promise(group) -> None:  # type: ignore[no-untyped-def]
    """A follower that acknowledged a leader's heartbeat and restarted at once must not vote
    for an election timeout: the leader's lease counted on it."""
    g = group(ABC)
    g.elect("a")
    g.tick(1)
    g.crash("b")
    b = g.start("b")
    request = VoteRequest(5, "c", "b", 99, 9)
    b.step(request)
    assert b.term == 1 and not b.has_ready()  # ignored: no new term, no answer
    for _ in range(E):
        b.tick()
    b.step(request)
    assert b.term == 5 and b.vote == "c"


def test_followers_in_lease_ignore_vote_requests(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    b = g.nodes["b"]
    b.step(VoteRequest(5, "c", "b", 10, 5))
    assert b.term == 1 and not b.has_ready()  # ignored: no term change, no answer


def test_leader_counts_only_current_term_entries(group) -> None:  # type: ignore[no-untyped-def]
    """Raft Figure 8, scripted: an old-term entry replicated to a majority is not committed by
    counting, so a candidate holding a newer conflicting entry may still win safely."""
    g = group(ABC, config=RaftConfig(pre_vote=False, check_quorum=False, max_msg_bytes=1))
    figure_8(g)
    assert g.nodes["a"].commit == 1  # index 2 (term 1) reached a and b but was not committed
    c = g.elect("c")  # legitimately: c's log (term 2 at index 2) is more up to date than b's
    g.tick(2, only=["c"])
    assert c.commit >= 3 and g.checker.committed[2][0] == 2


def test_committing_a_previous_term_entry_is_caught_in_figure_8(group) -> None:  # type: ignore[no-untyped-def]
    """The same script with the test-only fault: the leader commits index 2 by counting, and
    the checker reports the next leader, which cannot have it."""
    g = group(ABC, config=RaftConfig(pre_vote=False, check_quorum=False, max_msg_bytes=1),
              faults=RaftFaults(commit_previous_term=True))  # fmt: skip
    figure_8(g)
    assert g.nodes["a"].commit == 2
    with pytest.raises(Violation, match="leader-completeness"):
        g.elect("c")


def figure_8(g) -> None:  # type: ignore[no-untyped-def]
    """a writes E at index 2 alone; c wins term 2 with b and writes index 2 alone; a wins
    term 3 with b and copies E to b; the no-op that would commit E never reaches b."""
    from raft.types import Heartbeat

    a = g.elect("a")
    a.tick()
    g.drain("a")
    g.deliver()
    g.run("a", lambda n: n.propose(b"E", 1))
    g.queue.clear()
    g.isolate("a")
    c = g.elect("c", settle=False)
    g.run("a", lambda n: n.step(Heartbeat(c.term, "c", "a", 0)))
    g.queue.clear()
    g.heal()
    g.isolate("c")
    g.elect("a", settle=False)

    def holds_back_noop(message):  # type: ignore[no-untyped-def]
        # the no-op (index 3) is lost once b holds E: b has E, but not the no-op
        b_has_e = g.logs["b"].last_index >= 2
        return isinstance(message, AppendRequest) and message.prev_index >= 2 and b_has_e

    for _ in range(4):
        g.run("a", lambda n: n.tick())
        g.deliver(keep=holds_back_noop)
    g.queue.clear()
    g.heal()
    g.isolate("a")
    g.run("c", lambda n: n.step(Heartbeat(g.nodes["a"].term, "a", "c", 0)))
    g.queue.clear()


def test_leadership_transfer_with_timeout_now(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.run("a", lambda n: n.transfer_leader("b"))
    assert isinstance(g.queue[-1], TimeoutNow)
    g.deliver()
    assert g.leaders() == ["b"] and g.nodes["b"].term == 2
    assert a.role is Role.FOLLOWER


def test_transfer_refuses_proposals_and_aborts_after_an_election_timeout(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("c")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    g.run("a", lambda n: n.transfer_leader("c"))  # c is behind and unreachable
    with pytest.raises(ProposalDropped):
        a.propose(b"y", 1)
    with pytest.raises(ProposalDropped):
        a.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d"))
    g.tick(E, only=["a", "b"])
    assert a.transferee is None and a.role is Role.LEADER
    a.propose(b"y", 1)
    with pytest.raises(TransferRejected):
        a.transfer_leader("zz")


def test_transfer_to_a_lagging_voter_catches_it_up_first(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    g.isolate("c")
    for i in range(5):
        g.run("a", lambda n, i=i: n.propose(b"%d" % i, 1))
    g.deliver()
    g.heal()
    g.run("a", lambda n: n.transfer_leader("c"))
    g.deliver()
    assert g.leaders() == ["c"] and g.nodes["c"].log.last_index >= 6


def test_learner_lifecycle_add_catch_up_promote_remove(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    for i in range(3):
        g.run("a", lambda n, i=i: n.propose(b"%d" % i, 1))
    g.deliver()
    g.add("d")  # a new, empty member that knows no configuration yet
    g.isolate("d")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d")))
    g.deliver()
    assert a.configuration.learners == {"d"} and a.commit == a.log.last_index  # learner not needed
    with pytest.raises(ProposalDropped, match="not caught up"):
        a.change_config(ConfigChange(ConfigChangeOp.PROMOTE, "d"))
    g.heal()
    g.tick(2)
    d = g.nodes["d"]
    assert d.configuration == a.configuration and d.log.last_index == a.log.last_index
    assert a.is_caught_up("d")
    g.tick(E * 3, only=["d"])
    assert d.role is Role.FOLLOWER  # a learner never campaigns
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.PROMOTE, "d")))
    g.deliver()
    assert a.configuration.voters == {"a", "b", "c", "d"}
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "b")))
    g.deliver()
    g.tick(1)
    assert a.configuration == Configuration(frozenset({"a", "c", "d"}))
    assert g.nodes["c"].configuration == a.configuration


def test_one_configuration_change_at_a_time(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("a")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d")))
    assert a.configuration.learners == {"d"}  # in force once appended
    with pytest.raises(ProposalDropped, match="one change at a time"):
        a.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "e"))
    g.heal()
    g.deliver()
    g.tick(1)
    with pytest.raises(ConfigChangeRejected):
        a.change_config(ConfigChange(ConfigChangeOp.PROMOTE, "zz"))
    with pytest.raises(ConfigChangeRejected):
        a.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "b"))
    with pytest.raises(ConfigChangeRejected):
        a.change_config(ConfigChange(ConfigChangeOp.REMOVE, "zz"))


def test_new_leader_refuses_config_change_until_its_noop_commits(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.isolate("a")
    a = g.elect("a") if False else None
    assert a is None
    g.heal()
    g.split(["a"], ["c"])
    leader = g.nodes["a"]
    for _ in range(200):
        leader.tick()
        g.drain("a")
        g.deliver(keep=lambda m: isinstance(m, AppendRequest))
        if leader.role is Role.LEADER:
            break
    assert leader.role is Role.LEADER and leader.commit == 0
    with pytest.raises(ProposalDropped):
        leader.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d"))


def test_leader_removing_itself_transfers_first(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    with pytest.raises(ProposalDropped, match="before its removal"):
        g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "a")))
    g.drain("a")
    g.deliver()
    new = g.leaders()
    assert new and new != ["a"]
    leader = g.nodes[new[0]]
    g.run(new[0], lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "a")))
    g.deliver()
    assert leader.configuration.voters == {"b", "c"}
    g.tick(E * 3, only=["a"])
    assert g.nodes["a"].term == leader.term or g.nodes["a"].role is not Role.LEADER


def test_truncated_configuration_entry_reverts(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    g.split(["a", "b"], ["c"])
    g.split(["a"], ["b"])
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d")))
    g.queue.clear()
    assert g.nodes["a"].configuration.learners == {"d"}
    g.heal()
    g.isolate("a")
    g.tick(3 * E, only=["b", "c"])
    new = g.leaders()
    assert new and new != ["a"]
    g.run(new[-1], lambda n: n.propose(b"x", 1))
    g.deliver()
    g.heal()
    g.tick(2)
    assert g.nodes["a"].configuration.learners == frozenset()
    assert g.nodes["a"].role is Role.FOLLOWER


def test_replication_batches_by_bytes_and_bounds_inflight(group) -> None:  # type: ignore[no-untyped-def]
    config = RaftConfig(max_msg_bytes=200, max_inflight_msgs=2)
    g = group(ABC, config=config)
    a = g.elect("a")
    g.isolate("b")
    g.isolate("c")
    before = len(g.sent)
    for i in range(20):
        a.propose(b"%02d" % i, 1)  # 50 bytes each
    g.drain("a")
    to_b = [m for m in g.sent[before:] if isinstance(m, AppendRequest) and m.recipient == "b"]
    assert len(to_b) == 2  # then paused at max_inflight_msgs
    g.queue.clear()
    g.heal()
    before = len(g.sent)
    g.tick(3)
    sizes = [len(m.entries) for m in g.sent[before:] if isinstance(m, AppendRequest)]
    assert max(sizes) == 4  # 4 * 50 bytes fill a 200-byte message
    assert g.nodes["b"].log.last_index == a.log.last_index == a.commit == 21


def test_rejection_moves_probe_back_and_then_replicates(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("c")
    for i in range(10):
        g.run("a", lambda n, i=i: n.propose(b"%d" % i, 1))
    g.deliver()
    progress = a._progress["c"]
    assert progress.state is ProgressState.PROBE or progress.match_index < 11
    g.heal()
    g.tick(2)
    assert progress.state is ProgressState.REPLICATE and progress.match_index == 11


def test_follower_behind_the_retained_prefix_is_reset(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("c")
    for i in range(10):
        g.run("a", lambda n, i=i: n.propose(b"%d" % i, 2))
    g.deliver()
    g.tick(1, only=["a", "b"])
    g.logs["a"].compact(8)
    g.heal()
    g.tick(3)
    resets = [m for m in g.sent if isinstance(m, LogReset)]
    c_log = g.logs["c"]
    assert resets and resets[0].boundary.index == 7
    assert resets[0].boundary.config == g.bootstrap
    assert c_log.first_index == 8 and c_log.last_index == a.log.last_index
    assert c_log.boundary().next_offset == 12  # 6 batches of 2 records before index 8
    assert g.nodes["c"].commit == a.commit


def test_leader_fsync_in_parallel_counts_itself_only_when_durable(group) -> None:  # type: ignore[no-untyped-def]
    g = group(("a", "b", "c", "d", "e"))
    a = g.elect("a")
    g.defer_sync.add("a")
    g.split(["a", "b"], ["c", "d", "e"])
    g.run("a", lambda n: n.propose(b"x", 1))
    g.deliver()
    assert a.commit == 1  # b acknowledged, a's own copy is not durable: 1 of 5 durable + b
    g.heal()
    g.split(["a"], ["d", "e"])
    g.tick(1)
    assert a.commit == 1 and g.logs["a"].durable_last_index == 1  # a + b + c: a not yet durable
    g.fsync("a")
    assert a.commit == 2


def test_restart_takes_commit_no_further_than_the_log(group) -> None:  # type: ignore[no-untyped-def]
    g = group(("a",))
    a = g.elect("a")
    g.defer_sync.add("a")
    g.run("a", lambda n: n.propose(b"x", 1))
    g.fsync("a")
    assert a.commit == 2
    g.run("a", lambda n: n.propose(b"y", 1))
    g.hard["a"] = a.hard_state.__class__(a.term, a.vote, 3)  # a saved commit ahead of its fsync
    g.crash("a")
    restarted = g.start("a")
    assert restarted.commit == 2 == restarted.log.last_index


def test_has_ready_is_false_once_advanced(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    g.elect("a")
    g.tick(1)
    g.queue.clear()
    assert not any(n.has_ready() for n in g.nodes.values())


def test_step_ignores_messages_for_another_node(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    b: RaftNode = g.nodes["b"]
    b.step(VoteRequest(9, "c", "a", 0, 0))
    assert b.term == 0 and not b.has_ready()


def test_config_validation() -> None:
    with pytest.raises(RaftConfigError):
        RaftConfig(election_ticks=2, heartbeat_ticks=2)
    with pytest.raises(RaftConfigError):
        RaftConfig(max_msg_bytes=0)
    with pytest.raises(ValueError):
        Configuration(frozenset({"a"}), frozenset({"a"}))


def test_a_commit_sends_nothing_of_its_own_and_followers_learn_it_on_the_next_tick(group) -> None:  # type: ignore[no-untyped-def]
    """The commit releases the producer's reply at once; the followers hear of it with the next
    append or, with nothing to append, on the leader's next tick (within one tick)."""
    g = group(ABC)
    leader = g.elect("a")
    g.tick(2)
    before = len(g.sent)
    g.run("a", lambda n: n.propose(b"batch", 1))
    g.deliver()
    assert leader.commit == 2
    after_commit = [m for m in g.sent[before:] if m.sender == "a"]
    # the appends of the batch itself, and nothing more once their answers committed it
    assert [type(m).__name__ for m in after_commit] == ["AppendRequest", "AppendRequest"]
    assert all(m.commit == 1 for m in after_commit)
    assert g.nodes["b"].commit == g.nodes["c"].commit == 1
    g.tick(1, only=["a"])
    assert g.nodes["b"].commit == g.nodes["c"].commit == 2
    # told once: the next tick sends no further update
    told = len(g.sent)
    g.tick(1, only=["a"])
    assert not [m for m in g.sent[told:] if type(m).__name__ == "AppendRequest"]


# -- removed members learn it (replica GC) ----------------------------------------------------------


def _removed_messages(g, to: str) -> list[Removed]:  # type: ignore[no-untyped-def]
    return [m for m in g.sent if isinstance(m, Removed) and m.recipient == to]


def test_the_leader_tells_a_removed_member_once_its_removal_commits(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("b")  # b never sees the entry that removes it
    g.cut -= {("a", "c"), ("c", "a")}
    g.split(["c"], ["a"])  # and the removal cannot commit yet: c is cut off too
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "b")))
    g.deliver()
    index = a.configuration_index
    assert a.commit < index and not _removed_messages(g, "b")  # not before it commits
    g.heal()
    g.tick(2)
    assert a.commit >= index
    assert [m.config_index for m in _removed_messages(g, "b")] == [index]
    b = g.nodes["b"]
    assert b.removed_at == index  # b's own configuration (from before) is older
    assert not _removed_messages(g, "c")


def test_a_member_answers_a_removed_node_s_campaign(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)
    a = g.elect("a")
    g.isolate("b")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "b")))
    g.deliver()
    g.tick(2)
    index = a.configuration_index
    assert a.commit >= index and g.nodes["c"].commit >= index
    g.sent.clear()
    g.heal()
    b = g.nodes["b"]
    assert b.removed_at == 0  # the leader's word was lost on the cut link
    g.tick(E * 3, only=["b"])  # b campaigns (pre-vote) with its old configuration
    assert {m.sender for m in _removed_messages(g, "b")} >= {"a", "c"}
    assert b.removed_at == index


def test_removed_is_ignored_by_a_node_added_back(group) -> None:  # type: ignore[no-untyped-def]
    """A node with a configuration as new as, or newer than, the one that left it out was added
    back: deleting its log then could lose entries a quorum counted on it."""
    g = group(ABC)
    a = g.elect("a")
    g.add("d")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d")))
    g.deliver()
    g.tick(1)
    c = g.nodes["c"]
    assert c.configuration_index > 0
    for index in (c.configuration_index - 1, c.configuration_index):  # older, or the same
        c.step(Removed(a.term, "a", "c", index))
        assert c.removed_at == 0
    c.step(Removed(a.term, "a", "c", c.configuration_index + 1))
    assert c.removed_at == c.configuration_index + 1


def test_no_removed_reply_without_a_committed_configuration(group) -> None:  # type: ignore[no-untyped-def]
    g = group(ABC)  # the bootstrap configuration: no entry set it, so nothing proves a removal
    c = g.nodes["c"]
    c.step(VoteRequest(5, "z", "c", 10, 4, pre_vote=True))
    g.drain("c")
    assert not _removed_messages(g, "z")
    a = g.elect("a")
    g.isolate("a")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.ADD_LEARNER, "d")))
    a.step(VoteRequest(a.term + 1, "z", "a", 10, a.term, pre_vote=True))
    g.drain("a")
    assert a.commit < a.configuration_index and not _removed_messages(g, "z")  # uncommitted


def test_a_quiesced_removed_follower_that_missed_the_word_learns_it_by_probing(group) -> None:  # type: ignore[no-untyped-def]
    """A quiesced follower never campaigns, so if the leader's `Removed` was lost it would keep
    its copy for ever; its host probes it (placement no longer names it), and the members say."""
    g = group(ABC)
    a = g.elect("a")
    assert g.run("a", lambda n: n.quiesce()) is True
    g.deliver()
    b = g.nodes["b"]
    assert b.quiesced and b.role is Role.FOLLOWER
    g.isolate("b")
    g.run("a", lambda n: n.change_config(ConfigChange(ConfigChangeOp.REMOVE, "b")))
    g.deliver()
    g.tick(2, only=["a", "c"])
    index = a.configuration_index
    assert a.commit >= index and b.removed_at == 0  # the word was lost on the cut link
    g.heal()
    term = b.term
    g.run("b", lambda n: n.probe_membership())
    g.deliver()
    assert b.removed_at == index
    assert b.term == term and a.role is Role.LEADER and a.term == term  # nobody disrupted
    # a follower still counted in learns nothing of the kind, and disrupts nobody either
    g.sent.clear()
    g.run("c", lambda n: n.probe_membership())
    g.deliver()
    g.tick(E * 3)
    assert g.nodes["c"].removed_at == 0 and not _removed_messages(g, "c")
    assert a.role is Role.LEADER and a.term == term and g.nodes["c"].leader_id == "a"


def test_a_voided_lease_needs_heartbeats_sent_after_it(group) -> None:  # type: ignore[no-untyped-def]
    """A paused host (its ticks stopped while the followers' ran on) voids its leaders' leases:
    answers to heartbeats sent before the pause must not restore them, answers to new ones do."""
    g = group(ABC)
    leader = g.elect("a")
    g.tick(1)
    assert leader.lease_read_index() == leader.commit
    before = HeartbeatResponse(leader.term, "b", "a", leader._clock)  # answered pre-pause
    leader.void_lease()
    assert leader.lease_read_index() is None
    leader.step(before)
    leader.step(HeartbeatResponse(leader.term, "c", "a", leader._clock))
    assert leader.lease_read_index() is None  # both answer heartbeats sent before the pause
    g.tick(E // 2)  # heartbeats from the ticks after the pause are answered by b and c
    assert leader.lease_read_index() == leader.commit
