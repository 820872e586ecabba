"""`RaftConfig`: every tunable of the Raft core, with units and defaults.

Time is counted in ticks: the host calls `RaftNode.tick()` every `tick_interval` of its own
choosing (the cluster default is 100 ms), so `election_ticks=10` is a one-second election
timeout there. The core never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft.errors import RaftConfigError

__all__ = ["RaftConfig"]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Fields:

    election_ticks:      base election timeout, in ticks. A follower that hears nothing from a
                         leader for a timeout drawn uniformly from
                         [election_ticks, 2 * election_ticks) campaigns. With check_quorum, a
                         leader that has not heard from a quorum within election_ticks steps
                         down. Default 10.
    heartbeat_ticks:     ticks between a leader's heartbeats; must be < election_ticks.
                         Default 1.
    max_msg_bytes:       an AppendRequest carries entries up to this many bytes (entry data +
                         `ENTRY_OVERHEAD_BYTES` each), but always at least one entry.
                         Default 1 MiB.
    max_inflight_bytes:  per follower, bytes of entries sent and not yet acknowledged before
                         the leader pauses sending to it (replicate state). Default 8 MiB.
    max_inflight_msgs:   per follower, AppendRequests in flight before pausing. Default 256.
    max_uncommitted_bytes: a leader refuses proposals (ProposalDropped) while the entries it
                         appended in its term and has not yet committed hold this many bytes
                         or more: back-pressure when a quorum is slow or unreachable.
                         Default 64 MiB.
    pre_vote:            run a pre-vote round before a real election, so a node that cannot
                         win does not raise the term and disrupt a healthy leader (not at
                         term 0: an election for term 1 can unseat no leader). Default True.
    check_quorum:        a leader steps down when it has not heard from a quorum for
                         election_ticks, and a follower that heard from a leader within
                         election_ticks refuses to vote (a lease). Default True.
    """

    election_ticks: int = 10
    heartbeat_ticks: int = 1
    max_msg_bytes: int = 1024 * 1024
    max_inflight_bytes: int = 8 * 1024 * 1024
    max_inflight_msgs: int = 256
    max_uncommitted_bytes: int = 64 * 1024 * 1024
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        if self.heartbeat_ticks < 1:
            raise RaftConfigError(f"heartbeat_ticks={self.heartbeat_ticks} must be >= 1")
        if self.election_ticks <= self.heartbeat_ticks:
            raise RaftConfigError(
                f"election_ticks={self.election_ticks} must be greater than "
                f"heartbeat_ticks={self.heartbeat_ticks}"
            )
        if self.max_msg_bytes < 1:
            raise RaftConfigError(f"max_msg_bytes={self.max_msg_bytes} must be >= 1")
        if self.max_inflight_bytes < 1:
            raise RaftConfigError(f"max_inflight_bytes={self.max_inflight_bytes} must be >= 1")
        if self.max_uncommitted_bytes < 1:
            raise RaftConfigError(
                f"max_uncommitted_bytes={self.max_uncommitted_bytes} must be >= 1"
            )
        if self.max_inflight_msgs < 1:
            raise RaftConfigError(f"max_inflight_msgs={self.max_inflight_msgs} must be >= 1")
