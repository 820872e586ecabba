"""Deliberate bugs, for proving that the simulator's checker can fail. TEST-ONLY.

`RaftFaults` is not part of `RaftConfig` and is not exported by `raft`: no configuration file,
flag or environment variable reaches it. Only tests and `python -m raft.sim --fault NAME` build
one, and `RaftNode` takes it as a separate keyword argument. Each field names the Raft rule it
breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FAULT_NAMES", "NO_FAULTS", "RaftFaults"]


@dataclass(frozen=True, slots=True)
class RaftFaults:
    double_vote: bool = False  # grant a vote even when already voted for another in this term
    vote_ignores_log: bool = False  # grant votes without the candidate-log-up-to-date check
    commit_previous_term: bool = False  # count replicas for entries of earlier terms
    leader_counts_unsynced: bool = False  # leader counts its own entries before they are durable
    ack_before_persist: bool = False  # follower lets its acknowledgements go before its fsync
    stale_lease: bool = False  # lease reads without a quorum-acknowledged recent heartbeat
    rejoined_votes_blind: bool = False  # a re-added replica votes as if its deleted log was empty

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @classmethod
    def named(cls, name: str) -> RaftFaults:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; valid: {', '.join(FAULT_NAMES)}")
        return cls(**{name: True})


FAULT_NAMES = tuple(f.name for f in fields(RaftFaults))
NO_FAULTS = RaftFaults()
