"""How the client service (`cluster.service`) answers with gRPC statuses: ending a call with a
status and the trailers a client acts on, a read's `Refusal`, a topic change's
`cluster.errors` outcome (anything else is a bug: INTERNAL), and the status name metrics count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from cluster.errors import (
    ClusterError,
    ControlPlaneUnavailable,
    Invalid,
    TopicExists,
    TopicNotFound,
)
from cluster.failstop import NodeFailStopped
from cluster.idempotence import OutOfOrderSequence
from cluster.reads import Refusal, leaderless
from cluster.replica import Replica
from cluster.topics import FORWARDED_FOR_KEY, requested_by
from proto.reasons import REASON_KEY, SEQUENCE_BEHIND, SEQUENCE_IN_FLIGHT

__all__ = [
    "abort",
    "client_of",
    "refuse",
    "refuse_if_leaderless",
    "sequence_reason",
    "status_name",
    "topic_change",
]

T = TypeVar("T")

log = logging.getLogger("flotilla.service")


def sequence_reason(error: OutOfOrderSequence) -> str:
    """The reason an ABORTED out-of-order batch carries, which tells a node's copier
    (`cluster.copy_produce`) what it may do: behind (written long ago) is taken as written, in
    flight (its first copy not written yet) is sent again the same; either, sent under another
    producer id, would be written twice. "" (a sequence missing): rebased."""
    if error.behind:
        return SEQUENCE_BEHIND
    if error.in_flight:
        return SEQUENCE_IN_FLIGHT
    return ""


def client_of(context: grpc.aio.ServicerContext) -> dict[str, Any]:
    """Who asked for a topic change, for its log line: the client's address (the gRPC peer),
    and `via` the node that forwarded it here; the client is also set for this task so that
    a change this node forwards in turn names it (`cluster.topics.requested_by`)."""
    peer = context.peer()
    forwarded = dict(context.invocation_metadata() or ()).get(FORWARDED_FOR_KEY)
    client = str(forwarded) if forwarded else peer
    requested_by.set(client)
    return {"client": client, "via": peer} if forwarded else {"client": client}


def status_name(context: grpc.aio.ServicerContext, error: BaseException) -> str:
    """The gRPC status a call ended with, for metrics: what `context.abort` set, else
    CANCELLED for a call the client gave up, else UNKNOWN (an unexpected error)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    return "UNKNOWN"


async def refuse(context: grpc.aio.ServicerContext, refusal: Refusal) -> NoReturn:
    await abort(context, refusal.code, refusal.message, reason=refusal.reason)


# The status of each `cluster.errors` type a topic change reports (the most specific first).
TOPIC_STATUS: tuple[tuple[type[ClusterError], grpc.StatusCode], ...] = (
    (Invalid, grpc.StatusCode.INVALID_ARGUMENT),
    (TopicExists, grpc.StatusCode.ALREADY_EXISTS),
    (TopicNotFound, grpc.StatusCode.NOT_FOUND),
    (ControlPlaneUnavailable, grpc.StatusCode.UNAVAILABLE),
)


async def topic_change(context: grpc.aio.ServicerContext, change: Awaitable[T]) -> T:
    """Runs a topic change, answering its failures with their gRPC status. Only a
    `cluster.errors` type is an answer; any other exception is a bug: logged with its
    traceback, and reported as INTERNAL naming it (so a stray KeyError never reads "topic not
    found")."""
    try:
        return await change
    except ClusterError as error:
        for kind, code in TOPIC_STATUS:
            if isinstance(error, kind):
                await abort(context, code, str(error))
        await abort(context, grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")
    except NodeFailStopped:
        raise  # the process is exiting (`cluster.failstop`): no bug, and no answer to give
    except Exception as error:
        log.exception("topic change failed on a bug")
        await abort(
            context,
            grpc.StatusCode.INTERNAL,
            f"internal error ({type(error).__name__}: {error}); the change may not have been "
            "made, see the node's log",
        )


async def refuse_if_leaderless(
    context: grpc.aio.ServicerContext,
    replica: Replica,
    offset: int,
    node_id: str,
    in_doubt: Callable[[str], bool],
) -> None:
    refusal = leaderless(replica, offset, node_id, in_doubt)
    if refusal is not None:
        await refuse(context, refusal)


async def abort(
    context: grpc.aio.ServicerContext,
    code: grpc.StatusCode,
    message: str,
    leader: str = "",
    reason: str = "",
) -> NoReturn:
    """Ends the call with `code`; `leader` and `reason` (an `ErrorReason` name) go in trailing
    metadata `flotilla-leader` and `flotilla-error`."""
    trailing = [("flotilla-leader", leader)] if leader else []
    if reason:
        trailing.append((REASON_KEY, reason))
    if trailing:
        context.set_trailing_metadata(tuple(trailing))
    await context.abort(code, message)
    raise AssertionError("unreachable")  # abort raises
