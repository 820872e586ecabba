"""The SDK's errors: one small hierarchy under `FlotillaError`, each with an actionable message."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from proto.reasons import (
    COORDINATOR_LOADING,
    FENCED_MEMBER,
    GROUP_NOT_EMPTY,
    GROUP_NOT_FOUND,
    INCONSISTENT_TOPIC_UID,
    NOT_COORDINATOR,
    OFFSET_NOT_AVAILABLE,
    OVERLOADED,
    REASON_KEY,
    SEQUENCE_IN_FLIGHT,
    UNKNOWN_PRODUCER_ID,
)

if TYPE_CHECKING:
    from flotilla.types import Delivery

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "CoordinatorLoading",
    "FencedMember",
    "FlotillaError",
    "GroupNotEmpty",
    "GroupNotFound",
    "InvalidArgument",
    "LeaseLost",
    "NotCoordinator",
    "NotLeader",
    "OffsetNotAvailable",
    "OffsetOutOfRange",
    "OutOfOrder",
    "Overloaded",
    "SequenceInFlight",
    "StaleMetadata",
    "Timeout",
    "TopicNotFound",
    "Unavailable",
    "UnknownProducer",
    "from_rpc_error",
]


class FlotillaError(Exception):
    """Base class of every error the SDK raises."""


class AuthenticationError(FlotillaError):
    """The cluster does not know who is calling (gRPC UNAUTHENTICATED): no client certificate
    and no token, or a token it does not know (revoked, or of another cluster). The message is
    the node's. Never retried: give `tls_cert`/`tls_key` or `token` (or $FLOTILLA_TOKEN)."""


class AuthorizationError(FlotillaError, PermissionError):
    """The caller is known but no ACL lets it do this (gRPC PERMISSION_DENIED); the node's
    message names the principal, the operation and the resource. Nothing changed. Never
    retried: an admin grants it with `flotilla acl add` (`Client.add_acl`)."""


class InvalidArgument(FlotillaError, ValueError):
    """The request was refused as malformed (a bad name, size or option); nothing changed."""


class TopicNotFound(FlotillaError, LookupError):
    """The topic (or partition) does not exist."""


class OffsetOutOfRange(FlotillaError, IndexError):
    """The offset is outside the partition's retained, committed range."""


class NotLeader(FlotillaError):
    """The node asked is not the partition's leader; `leader` is "id=host:port" when known.
    The SDK follows such hints by itself; you see this only when retries ran out."""

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


class NotCoordinator(NotLeader):
    """The node asked does not coordinate the consumer group; `leader` names the one that does
    ("id=host:port") when known. The SDK follows it by itself; you see this only when retries
    ran out."""


class FencedMember(FlotillaError):
    """A consumer-group member was refused: its session ended (it was silent past its session
    timeout, or paused), it left or was replaced, or it named a partition it no longer owns.
    Nothing was committed. The consumer rejoins the group by itself on its next `poll`."""


class LeaseLost(FlotillaError):
    """A queue settlement (ack, release, reject or extend) was refused for `deliveries`: their
    leases expired, moved to another receiver, were settled already, or this receiver's session
    ended (then it forgot every lease it held, and rejoined). Nothing changed for them; the
    other deliveries of the same call were applied before this was raised."""

    def __init__(self, message: str, deliveries: list[Delivery]) -> None:
        super().__init__(message)
        self.deliveries = deliveries


class GroupNotFound(FlotillaError, LookupError):
    """The consumer group does not exist: it has no members and no committed offsets."""


class GroupNotEmpty(FlotillaError):
    """The consumer group has active members, so its offsets cannot be reset nor the group
    deleted; close its consumers first (or wait for their sessions to time out)."""


class Unavailable(FlotillaError):
    """No node could serve the request (no leader yet, no quorum, or unreachable); retry later."""


class CoordinatorLoading(Unavailable):
    """The consumer group's coordinator was just elected and is still loading the groups' state
    (or the cluster is creating its `__groups` topic). The SDK retries by itself."""


class OffsetNotAvailable(Unavailable):
    """The replica asked has not committed the offset yet, though another may have (a follower
    whose high watermark trails the leader's, or a replica just restarted; Kafka's
    OFFSET_NOT_AVAILABLE). The SDK tries the other replicas by itself; you see this only when
    none of them served the offset in time."""


class StaleMetadata(Unavailable):
    """The node asked holds, or knows, another incarnation of the topic than the client's
    metadata names (the topic was deleted and created again under its name, and one of the two
    views has not caught up): nothing was read or written. The SDK refreshes its metadata and
    retries by itself (Kafka's INCONSISTENT_TOPIC_ID); you see this only when retries ran out."""


class OutOfOrder(Unavailable):
    """The leader refused a batch because an earlier batch of the same producer and partition
    is not written yet (several batches in flight, or a retry). The SDK retries it by itself."""


class SequenceInFlight(OutOfOrder):
    """The leader refused a batch because this very batch's earlier attempt is still in its
    hands: proposed, not written yet (the attempt ended on its deadline). The SDK sends it again
    under the same producer id and sequence, to be answered with the first copy's offsets, never
    under another id (which could write it twice)."""


class UnknownProducer(Unavailable):
    """The partition does not know the batch's producer id (its state expired, was evicted, or
    the batch that introduced it was lost) and the batch does not start at sequence 0; nothing
    was written. The SDK resends such a batch under a new producer id by itself."""


class Overloaded(Unavailable):
    """The node refused the call at its edge: it has as many produce calls or bytes in flight as
    it admits (max_inflight_produce, max_inflight_request_bytes). Nothing was written. The SDK
    retries it by itself after a growing, jittered backoff; you see this only when the node
    stayed overloaded until the call's timeout."""


class Timeout(FlotillaError, TimeoutError):
    """The request did not complete in time; for a produce, the outcome is unknown (a retry with
    the same idempotent producer will not write it twice)."""


def _trailing(error: grpc.RpcError, wanted: str) -> str:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == wanted:
            return str(value)
    return ""


def reason_from(error: grpc.RpcError) -> str:
    """The `ErrorReason` name a node attached to the status (proto/reasons.py), or ""."""
    return _trailing(error, REASON_KEY)


def leader_from(error: grpc.RpcError) -> str:
    return _trailing(error, "flotilla-leader")


def from_rpc_error(error: grpc.RpcError) -> FlotillaError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or str(code)
    group_error = _group_error(code, reason_from(error), details, error)
    if group_error is not None:
        return group_error
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(details)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return AuthorizationError(details)
    if code == grpc.StatusCode.UNIMPLEMENTED:  # no other node of its release will offer it
        return FlotillaError(f"{details} (UNIMPLEMENTED: the node does not offer this call)")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and reason_from(error) == OVERLOADED:
        return Overloaded(details)
    # otherwise too big: a batch over max_batch_bytes, a message over gRPC's limit
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return InvalidArgument(details)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return InvalidArgument(details)
    if code == grpc.StatusCode.NOT_FOUND:
        return TopicNotFound(details)
    if code == grpc.StatusCode.OUT_OF_RANGE:
        return OffsetOutOfRange(details)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return NotLeader(details, leader_from(error))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(details)
    if code == grpc.StatusCode.ABORTED:
        if reason_from(error) == UNKNOWN_PRODUCER_ID:
            return UnknownProducer(details)
        if reason_from(error) == SEQUENCE_IN_FLIGHT:
            return SequenceInFlight(details)
        return OutOfOrder(details)
    if reason_from(error) == OFFSET_NOT_AVAILABLE:
        return OffsetNotAvailable(details)
    if reason_from(error) == INCONSISTENT_TOPIC_UID:
        return StaleMetadata(details)
    return Unavailable(f"{details} ({code.name})")


def _group_error(
    code: grpc.StatusCode, reason: str, details: str, error: grpc.RpcError
) -> FlotillaError | None:
    """The consumer-group error a status names by its reason (proto/reasons.py), if any."""
    if not reason:
        return None
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        if reason == NOT_COORDINATOR:
            return NotCoordinator(details, leader_from(error))
        if reason == FENCED_MEMBER:
            return FencedMember(details)
        if reason == GROUP_NOT_EMPTY:
            return GroupNotEmpty(details)
    if code == grpc.StatusCode.NOT_FOUND and reason == GROUP_NOT_FOUND:
        return GroupNotFound(details)
    if code == grpc.StatusCode.UNAVAILABLE and reason == COORDINATOR_LOADING:
        return CoordinatorLoading(details)
    return None
