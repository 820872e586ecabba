"""Machine-readable reasons a node attaches to an error status, in the trailing metadata under
`REASON_KEY`, where the gRPC status code alone is ambiguous: the names of `ErrorReason` in
proto/flotilla.proto, where each is documented. The SDK maps them to its errors."""

from __future__ import annotations

__all__ = [
    "COORDINATOR_LOADING",
    "FENCED_MEMBER",
    "GROUP_NOT_EMPTY",
    "GROUP_NOT_FOUND",
    "INCONSISTENT_TOPIC_UID",
    "NOT_COORDINATOR",
    "OFFSET_NOT_AVAILABLE",
    "OVERLOADED",
    "REASON_KEY",
    "REPLICA_CLOSED",
    "SEQUENCE_BEHIND",
    "SEQUENCE_IN_FLIGHT",
    "UNKNOWN_PRODUCER_ID",
]

REASON_KEY = "flotilla-error"
OFFSET_NOT_AVAILABLE = "OFFSET_NOT_AVAILABLE"  # UNAVAILABLE: try another replica
REPLICA_CLOSED = "REPLICA_CLOSED"  # UNAVAILABLE: the replica's log closed during the read
UNKNOWN_PRODUCER_ID = "UNKNOWN_PRODUCER_ID"  # ABORTED: resend under a new producer id
OVERLOADED = "OVERLOADED"  # RESOURCE_EXHAUSTED: the node's produce gate is full; back off, retry
NOT_COORDINATOR = "NOT_COORDINATOR"  # FAILED_PRECONDITION: ask the group's coordinator
COORDINATOR_LOADING = "COORDINATOR_LOADING"  # UNAVAILABLE: retry shortly
FENCED_MEMBER = "FENCED_MEMBER"  # FAILED_PRECONDITION: rejoin; nothing changed
GROUP_NOT_FOUND = "GROUP_NOT_FOUND"  # NOT_FOUND
GROUP_NOT_EMPTY = "GROUP_NOT_EMPTY"  # FAILED_PRECONDITION: the group has members
SEQUENCE_BEHIND = "SEQUENCE_BEHIND"  # ABORTED: written long ago; never resend under a new id
# ABORTED: the batch's first copy is proposed, not yet written; resend the same, never a new id
SEQUENCE_IN_FLIGHT = "SEQUENCE_IN_FLIGHT"
INCONSISTENT_TOPIC_UID = "INCONSISTENT_TOPIC_UID"  # UNAVAILABLE: another incarnation; refresh
