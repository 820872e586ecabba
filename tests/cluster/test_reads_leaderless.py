"""`cluster.reads.leaderless`: when a follower refuses a read at or past its high watermark as
out of touch with any leader. A ticking follower counts its own ticks; a quiesced one (its
clock stands still) asks this node's membership about its leader."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness import hand_driven_host

from cluster.reads import leaderless
from cluster.replica import Replica
from raft.codec import encode_message
from raft.types import Heartbeat

GROUP = "t/0"


def _follower(tmp_path: Path, *, quiesce: bool) -> Replica:
    """A host "b" whose replica of GROUP heard a heartbeat from its leader "a" (one that
    quiesces it, or an ordinary one), after which the host ticked once."""

    async def scenario() -> Replica:
        multiraft, replica, _ = hand_driven_host(tmp_path, GROUP)
        heartbeat = Heartbeat(1, "a", "b", 0, quiesce=quiesce)
        multiraft.deliver("a", [(GROUP, encode_message(heartbeat))])
        multiraft.tick(0.05)
        await multiraft.run_round()
        await multiraft.stop()
        return replica

    return asyncio.run(scenario())


def test_a_quiesced_follower_whose_leader_membership_doubts_refuses_at_once(tmp_path: Path) -> None:
    """Cut off from a quiesced group, a follower hears nothing (nor would it in touch): its
    clock stands still. Until this node's membership declares the leader dead (seconds, and
    then an election timeout of ticks) its subscribers would wait on it for nothing; once the
    membership suspects the leader, the read is refused, naming the leader and why."""
    replica = _follower(tmp_path, quiesce=True)
    node = replica.node
    assert node.quiesced and node.leader_id == "a"
    assert node.ticks_without_leader < node.config.election_ticks
    assert leaderless(replica, 0, "b") is None  # no doubt: in touch
    assert leaderless(replica, 0, "b", in_doubt=lambda member: member == "c") is None
    refusal = leaderless(replica, 0, "b", in_doubt=lambda member: member == "a")
    assert refusal is not None
    assert refusal.reason == "OFFSET_NOT_AVAILABLE", refusal
    assert "its leader a" in refusal.message and "quiesced" in refusal.message, refusal.message


def test_a_ticking_follower_goes_by_its_ticks_not_by_doubt(tmp_path: Path) -> None:
    """A follower that is ticking learns within an election timeout whether its leader still
    speaks: a suspicion alone (often wrong under load) does not send its readers away."""
    replica = _follower(tmp_path, quiesce=False)
    assert not replica.node.quiesced and replica.node.leader_id == "a"
    assert leaderless(replica, 0, "b", in_doubt=lambda member: True) is None
