"""Appending a batch that copies another one into a partition exactly once, as a deterministic
idempotent producer (a dead letter, `cluster.dead_letters`; a due timer, `cluster.timers`).

The copy goes, acks=all, through the node's normal produce path: a Produce to the partition's
leader (this node included), asking anew where the leader moved. Its (producer id, sequence)
are derived from what is copied, so whoever repeats the copy (a successor after a failover)
sends the same and the partition answers the repeat as a duplicate: the copy lands once.

A partition that answers that the copy's first copy is proposed and not written yet (ABORTED,
`SEQUENCE_IN_FLIGHT`: a retry that raced an earlier attempt still in the leader's hands) is sent
the same copy again shortly, and answers it with the first copy's offsets (or writes it, if a
new leader cut the first one): never rebased, which would write it twice. A partition that
refuses the copy's sequence otherwise (ABORTED: it forgot the producer after a day
without copies, the topic was recreated or grew partitions, or a sequence is missing) takes it
again under `rebased_producer_id(producer id, sequence)` at sequence 0: derived from the pair
alone, so a successor's repeat is a duplicate there too. A copy the partition would know under
the first id is never rebased: it is answered as a duplicate before any sequence check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import xxhash

from cluster.errors import ClusterError
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.reasons import REASON_KEY, SEQUENCE_BEHIND, SEQUENCE_IN_FLIGHT
from proto.records import peek_producer, with_producer

__all__ = [
    "CopyFailed",
    "CopyProducer",
    "SequenceRefused",
    "rebased_producer_id",
]

log = logging.getLogger("flotilla.copies")

# One attempt's deadline (the SDK's `ATTEMPT_S`): a leader that hangs (paused: its connections
# stay open and nothing answers; overloaded) is left, and the partition's leader is asked anew
# (a successor is elected within an election timeout). A retry of a copy that landed meanwhile
# is answered as a duplicate.
ATTEMPT_S = 2.0
ATTEMPTS = 3  # the leader may have moved: ask again this many times
# While an attempt waits, this node's own view of the leader is looked at this often: a new
# leader elected meanwhile is sent the copy at once.
LEADER_CHECK_S = 0.05
# A copy answered in flight (its first attempt not written yet) is sent again after these waits
# (about 0.6 s in all), then given up as a failed copy, which the caller retries.
IN_FLIGHT_WAITS_S = (0.02, 0.04, 0.08, 0.16, 0.32)
_RETRIED = (
    grpc.StatusCode.FAILED_PRECONDITION,  # not the leader
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,  # a hanging leader: ask where the leader is now
)

Leader = Callable[[str, int, bool], Awaitable[str | None]]  # (topic, partition, fresh)
KnownLeader = Callable[[str, int], str | None]  # (topic, partition): this node's view, no I/O
Stub = Callable[[str], flotilla_pb2_grpc.FlotillaStub | None]


class CopyFailed(ClusterError):
    """A copy that did not happen this time (the caller retries)."""


class SequenceRefused(CopyFailed):
    """The partition does not take the copy's (producer id, sequence) as that producer's next
    batch (ABORTED: it does not know the producer, or a sequence is missing). `behind`: the
    sequence is below the producer's next one and older than the partition remembers
    (`SEQUENCE_BEHIND`): that copy was written long ago. `in_flight`: a copy at that sequence
    is proposed and not written yet (`SEQUENCE_IN_FLIGHT`): to be sent again, the same."""

    def __init__(self, message: str, behind: bool = False, in_flight: bool = False) -> None:
        super().__init__(message)
        self.behind = behind
        self.in_flight = in_flight


def rebased_producer_id(producer_id: int, sequence: int) -> int:
    """The producer a copy refused at (`producer_id`, `sequence`) is sent under, at sequence 0."""
    digest = xxhash.xxh64_intdigest(f"{producer_id}\0{sequence}\0rebased".encode())
    return (digest & ((1 << 63) - 1)) or 1


class CopyProducer:
    """Appends copies through the node's produce path (`leader` finds a partition's leader,
    `stub` a member's client stub)."""

    def __init__(
        self,
        leader: Leader,
        stub: Stub,
        attempt_s: float = ATTEMPT_S,
        known_leader: KnownLeader = lambda topic, partition: None,
    ) -> None:
        """`known_leader`: the leader as this node's own replica of the partition knows it,
        watched while an attempt waits (`_attempt`)."""
        self._leader = leader
        self._known_leader = known_leader
        self._stub = stub
        self.attempt_s = attempt_s

    async def copy(
        self, topic: str, partition: int, batch: bytes, topic_uid: str = ""
    ) -> pb.ProduceResponse:
        """Appends `batch` (carrying its derived producer id and sequence) to incarnation
        `topic_uid` of the topic ("": whichever the leader holds); rebased once when refused
        as out of sequence; sent again as it is while its first copy is in flight. Raises
        `CopyFailed`."""
        wait_s: float | None
        for wait_s in (*IN_FLIGHT_WAITS_S, None):
            try:
                return await self.produce(topic, partition, batch, topic_uid)
            except SequenceRefused as refused:
                if not refused.in_flight:
                    return await self._refused(refused, topic, partition, batch, topic_uid)
                if wait_s is None:
                    raise CopyFailed(f"{refused}; still in flight: given up for now") from None
                # an earlier attempt is still in the leader's hands: the same copy again is
                # answered with its offsets (rebased, it would be written twice)
                log.info("%s; sending it again in %.2f s", refused, wait_s)
                await asyncio.sleep(wait_s)
        raise AssertionError("unreachable")

    async def _refused(
        self, refused: SequenceRefused, topic: str, partition: int, batch: bytes, topic_uid: str
    ) -> pb.ProduceResponse:
        """A copy refused as out of sequence, and not in flight: taken as written when behind,
        else sent once more under its rebased producer at sequence 0."""
        if refused.behind:
            # written long ago (a plan fired again after a failover reaches back past the
            # batches the partition remembers): rebased, it would be written twice
            log.info("%s; it is written already", refused)
            return pb.ProduceResponse(duplicate=True)
        producer_id, sequence = peek_producer(batch)
        rebased = rebased_producer_id(producer_id, sequence)
        log.info("%s; appending it under producer %d at sequence 0", refused, rebased)
        rebased_batch = with_producer(batch, rebased, 0)
        return await self.produce(topic, partition, rebased_batch, topic_uid)

    async def produce(
        self, topic: str, partition: int, batch: bytes, topic_uid: str = ""
    ) -> pb.ProduceResponse:
        """One append, acks=all, to the partition's leader (asking anew where it moved), of
        incarnation `topic_uid` ("": any; a replica of another is never written).
        Raises `SequenceRefused` on ABORTED, `CopyFailed` on anything else."""
        request = pb.ProduceRequest(
            topic=topic, partition=partition, batch=batch, acks=pb.ACKS_ALL,
            timeout_ms=int(self.attempt_s * 1000), topic_uid=topic_uid,
        )  # fmt: skip
        errors: list[str] = []
        failed: str | None = None  # the leader the last attempt failed at
        for _ in range(ATTEMPTS):
            if failed is None:
                leader = await self._leader(topic, partition, False)
            else:
                leader = await self._successor(topic, partition, failed)
            stub = self._stub(leader) if leader else None
            if stub is None or leader is None:
                errors.append(f"no leader of {topic}/{partition} known")
                continue
            failed = leader
            try:
                response = await self._attempt(stub, request, topic, partition, leader)
            except grpc.aio.AioRpcError as error:
                errors.append(f"{leader}: {error.code().name} {error.details()}")
                if error.code() is grpc.StatusCode.ABORTED:
                    reasons = {
                        value
                        for key, value in (error.trailing_metadata() or ())
                        if key == REASON_KEY
                    }
                    raise SequenceRefused(
                        f"{topic}/{partition} refused the copy ({errors[-1]})",
                        behind=SEQUENCE_BEHIND in reasons,
                        in_flight=SEQUENCE_IN_FLIGHT in reasons,
                    ) from None
                if error.code() not in _RETRIED:
                    break
                continue
            if response is not None:
                return response
            errors.append(f"{leader}: left for the new leader before it answered")
        raise CopyFailed(f"appending to {topic}/{partition} failed ({'; '.join(errors)})")

    async def _successor(self, topic: str, partition: int, failed: str) -> str | None:
        """The leader to try after `failed`: the one this node's replica knows, if another;
        else the metadata view asked anew — which waits up to a second on a paused member, so
        this node's replica is watched meanwhile, and whichever names a leader first wins."""
        known = self._known_leader(topic, partition)
        if known not in (failed, None):
            return known
        asking = asyncio.ensure_future(self._leader(topic, partition, True))
        asking.add_done_callback(_retrieve)
        try:
            while True:
                done, _ = await asyncio.wait((asking,), timeout=LEADER_CHECK_S)
                known = self._known_leader(topic, partition)
                if known not in (failed, None):
                    return known
                if done:
                    return asking.result()
        finally:
            asking.cancel()

    async def _attempt(
        self,
        stub: flotilla_pb2_grpc.FlotillaStub,
        request: pb.ProduceRequest,
        topic: str,
        partition: int,
        leader: str,
    ) -> pb.ProduceResponse | None:
        """One Produce to `leader`, for at most `attempt_s`; None when, before it answers, this
        node learns of another leader (its replica of the partition heard from one): the call
        is left, and the caller sends to that leader at once rather than wait out a hanging
        one (a retry of a batch that lands after all is answered as a duplicate)."""
        call = stub.Produce(request, timeout=self.attempt_s)
        answer: asyncio.Future[pb.ProduceResponse] = asyncio.ensure_future(call)
        answer.add_done_callback(_retrieve)  # a call left behind fails unread: no error
        try:
            while True:
                done, _ = await asyncio.wait((answer,), timeout=LEADER_CHECK_S)
                if done:
                    return answer.result()
                now = self._known_leader(topic, partition)
                if now is not None and now != leader:
                    return None
        finally:
            if not answer.done():
                call.cancel()
                answer.cancel()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
