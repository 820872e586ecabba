"""What a replica answers a read it cannot serve as asked: the rule stated at `FetchRequest` in
proto/flotilla.proto (KIP-392's, made strict), and the waits before it answers.

    log_start <= offset <= high_watermark   served (none at the high watermark)
    offset < log_start                      OUT_OF_RANGE
    offset > high_watermark                 OUT_OF_RANGE only from a leader holding its lease,
                                            for an offset past its commit index; otherwise
                                            UNAVAILABLE + OFFSET_NOT_AVAILABLE (retriable)

A follower that has heard from no leader for an election timeout (cut off from its group, or
its leader gone; `RaftNode.ticks_without_leader`) answers OFFSET_NOT_AVAILABLE at once for an
offset past its high watermark, and for one at it when the read would wait (a long poll, a
subscription's) rather than wait for nothing or keep a subscription alive on keepalives while
the others write on (`leaderless`): its subscribers move to another replica. Below its high
watermark it still serves: those offsets are committed. A quiesced follower's clock stands
still (an idle group's leader sends nothing, in touch or not): it is out of touch as soon as
this node's membership doubts its leader (suspected, dead or gone), rather than seconds later
when the membership declares the leader dead and the woken follower has counted an election
timeout.

A follower cannot know what the leader committed (its high watermark trails by up to a tick, and
is the one it recovered after a restart until it hears a leader), and a leader without its lease
may have been deposed by one that committed more: neither may say an offset does not exist, so
an acknowledged offset is never answered OUT_OF_RANGE. Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from cluster.replica import Replica
from proto import flotilla_pb2 as pb
from raft.types import Role

__all__ = [
    "KEEPALIVE_MS",
    "READ_YOUR_WRITES_WAIT_S",
    "Refusal",
    "catch_up",
    "leaderless",
    "offset_out_of_range",
    "other_incarnation",
    "past_high_watermark",
    "replica_closed",
]

# A read whose `min_high_watermark` (read-your-writes) is above this replica's high watermark
# waits this long at most for it: a follower learns a commit within one Raft tick. After that
# the read is served as it stands, and the client tries another replica.
READ_YOUR_WRITES_WAIT_S = 0.5
# A leader asked for an offset past its high watermark waits this long at most for its lease
# (waking its group if quiesced) before it may answer OUT_OF_RANGE; else it cannot be sure.
LEASE_WAIT_S = 0.5
# A Subscribe stream's keepalive interval when the request's max_wait_ms is 0.
KEEPALIVE_MS = 1000


@dataclass(frozen=True, slots=True)
class Refusal:
    """A read's failure as the client sees it: a status, a message naming the offset and what
    is valid, and an `ErrorReason` name for trailing metadata `flotilla-error` (or "")."""

    code: grpc.StatusCode
    message: str
    reason: str = ""


def offset_out_of_range(replica: Replica, offset: int) -> Refusal:
    return Refusal(
        grpc.StatusCode.OUT_OF_RANGE,
        f"offset {offset} is out of range for {replica.group}: valid offsets are "
        f"{replica.segmented.first_offset}..{replica.high_watermark} (the high watermark)",
    )


async def catch_up(replica: Replica, high_watermark: int, wait_s: float) -> None:
    """Waits (up to `wait_s`) for the replica to commit up to `high_watermark`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while replica.high_watermark < high_watermark:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(replica.hw_changed.wait(), remaining)


async def past_high_watermark(
    replica: Replica,
    offset: int,
    node_id: str,
    wake: Callable[[str], None],
    tick_s: float,
    stalled: Callable[[], bool] = lambda: False,
) -> Refusal:
    """The answer for `offset` past this replica's high watermark (after any wait). `stalled`:
    are the node's ticks overdue (a pause), so that no lease is to be trusted yet?"""
    commit_offset = await _leased_commit_offset(replica, wake, tick_s, stalled)
    if commit_offset is not None and offset > commit_offset:
        return offset_out_of_range(replica, offset)
    return Refusal(
        grpc.StatusCode.UNAVAILABLE,
        f"offset {offset} of {replica.group} is not available on {node_id} yet: its high "
        f"watermark is {replica.high_watermark} (its log ends at "
        f"{replica.segmented.next_offset}); another replica, or this one shortly, may serve it",
        pb.ErrorReason.Name(pb.OFFSET_NOT_AVAILABLE),
    )


def leaderless(
    replica: Replica,
    offset: int,
    node_id: str,
    in_doubt: Callable[[str], bool] = lambda member_id: False,
) -> Refusal | None:
    """OFFSET_NOT_AVAILABLE for `offset` (past the high watermark, or at it for a long poll) on a
    replica that has heard from no leader for an election timeout of its ticks, or that is
    quiesced while this node's membership doubts its leader (`in_doubt(member_id)`); None while
    it is in touch."""
    node = replica.node
    silent = node.ticks_without_leader
    election_ticks = node.config.election_ticks
    if silent < election_ticks:
        leader = node.leader_id
        if not (node.quiesced and leader is not None and in_doubt(leader)):
            return None
        return Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"offset {offset} of {replica.group} is not available on {node_id}: the group is "
            f"quiesced and this node's membership doubts its leader {leader} (suspected, dead "
            "or gone), so it cannot know what was committed past its high watermark "
            f"{replica.high_watermark}; read another replica",
            pb.ErrorReason.Name(pb.OFFSET_NOT_AVAILABLE),
        )
    return Refusal(
        grpc.StatusCode.UNAVAILABLE,
        f"offset {offset} of {replica.group} is not available on {node_id}: it has heard from "
        f"no leader for {silent} ticks (an election timeout is {election_ticks}), so it cannot "
        f"know what was committed past its high watermark {replica.high_watermark}; read "
        "another replica",
        pb.ErrorReason.Name(pb.OFFSET_NOT_AVAILABLE),
    )


def other_incarnation(
    group: str, asked_uid: str, known_uid: str, replica_uid: str, node_id: str
) -> Refusal | None:
    """UNAVAILABLE + INCONSISTENT_TOPIC_UID when a read or produce of `group` may not be served
    here: the request names a topic incarnation (`asked_uid`; "" names none) other than the one
    this node knows (`known_uid`), or this node's replica (`replica_uid`; "" for no replica, or
    one of unknown incarnation) is of another incarnation than `known_uid` (the topic was
    deleted and created again, and that replica is not dropped yet). None: it may be served.
    Either way the client's metadata or this node's view is stale: it refreshes and retries."""
    if not known_uid:  # a topic of a release before incarnations: nothing to compare
        return None
    if asked_uid and asked_uid != known_uid:
        return Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"{group} on {node_id} is of topic incarnation {known_uid}, not {asked_uid} as "
            "asked: the topic was deleted and created again, and either the client's metadata "
            "or this node's is stale; refresh the metadata and retry (another replica, or this "
            "one shortly)",
            pb.ErrorReason.Name(pb.INCONSISTENT_TOPIC_UID),
        )
    if replica_uid and replica_uid != known_uid:
        return Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"the replica of {group} on {node_id} belongs to topic incarnation {replica_uid}, "
            f"deleted since (the topic is now {known_uid}), and is not dropped yet: it answers "
            "nothing; refresh the metadata and retry (another replica, or this one shortly)",
            pb.ErrorReason.Name(pb.INCONSISTENT_TOPIC_UID),
        )
    return None


def replica_closed(replica: Replica, topic_uid: str | None, node_id: str) -> Refusal:
    """The replica's log closed under a read: its topic was deleted (NOT_FOUND; `topic_uid` is
    the topic's current incarnation, None if there is none), or the replica left this node or
    is reopening (UNAVAILABLE: another replica may serve the read)."""
    if topic_uid is None or (replica.topic_uid and topic_uid and topic_uid != replica.topic_uid):
        return Refusal(
            grpc.StatusCode.NOT_FOUND,
            f"topic {replica.topic!r} was deleted while {replica.group} was read on {node_id}",
        )
    return Refusal(
        grpc.StatusCode.UNAVAILABLE,
        f"the replica of {replica.group} on {node_id} closed during the read (it moved to "
        "other nodes, or is reopening); read another replica",
        pb.ErrorReason.Name(pb.REPLICA_CLOSED),
    )


async def _leased_commit_offset(
    replica: Replica, wake: Callable[[str], None], tick_s: float, stalled: Callable[[], bool]
) -> int | None:
    """The offset after the commit index, if this replica leads its group and holds its lease
    (so no other leader can have committed more: `RaftNode.lease_read_index`); None when it
    does not lead, or gets no lease within LEASE_WAIT_S (a quiesced leader is woken to get one)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LEASE_WAIT_S
    while replica.node.role is Role.LEADER:
        index = None if stalled() else replica.node.lease_read_index()
        if index is not None:
            return replica.segmented.offset_after(index)
        if loop.time() >= deadline:
            break
        if replica.node.quiesced:
            replica.idle_ticks = 0  # else the driver quiesces it again at the next tick
            wake(replica.group)
        await asyncio.sleep(tick_s)
    return None
