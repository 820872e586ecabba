"""A copy (a due timer fired, a dead letter) whose earlier attempt is still in the leader's hands
— proposed, not yet written: the attempt ended on its deadline, or the firing pipeline failed
around it — is refused by the leader as in flight (ABORTED, `SEQUENCE_IN_FLIGHT`). The copier
must send the same copy again, to be answered with the first copy's offsets; before this reason
existed it took any ABORTED but `SEQUENCE_BEHIND` as "sequence missing" and rebased the copy
under another producer id, so the first copy landed and the rebased one too (a CI run fired a
due batch twice across a leader kill; `python -m timers.sim --fault rebase_in_flight` shows it).

A real gRPC server on loopback stands in for the leader, answering with the node's own verdicts
and statuses (`cluster.idempotence.Idempotence`, `cluster.statuses.sequence_reason`, `abort`)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from cluster.copy_produce import IN_FLIGHT_WAITS_S, CopyFailed, CopyProducer, rebased_producer_id
from cluster.idempotence import Duplicate, Fresh, Idempotence
from cluster.local import free_port
from cluster.producers import BatchRef
from cluster.statuses import abort, sequence_reason
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch, peek_producer, peek_record_count

P, TERM = 4242, 3


class _Leader(flotilla_pb2_grpc.FlotillaServicer):
    """P wrote sequences 0-1; its batch at sequence 2 is proposed and not written until call
    number `lands_at` comes in (None: never)."""

    def __init__(self, lands_at: int | None) -> None:
        self.owner = Idempotence()
        self.owner.written(P, 0, BatchRef(1, TERM, 2))
        self.owner.proposed(P, 4, TERM)
        self.lands_at = lands_at
        self.calls: list[tuple[int, int]] = []  # (producer id, base sequence) of each Produce
        self.index = 1

    def _write(self, producer: int, sequence: int, count: int) -> int:
        self.index += 1
        self.owner.written(producer, sequence, BatchRef(self.index, TERM, count))
        return self.index

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        producer, sequence = peek_producer(request.batch)
        count = peek_record_count(request.batch)
        self.calls.append((producer, sequence))
        if len(self.calls) == self.lands_at:
            self._write(P, 2, 2)  # the first copy is appended before this call is looked at
        verdict = self.owner.admit(producer, sequence, count, TERM)
        if isinstance(verdict, Duplicate):
            return pb.ProduceResponse(base_offset=verdict.ref.index, duplicate=True)
        if isinstance(verdict, Fresh):
            return pb.ProduceResponse(base_offset=self._write(producer, sequence, count))
        refusal = self.owner.refusal(verdict, producer, sequence, TERM, "t/0")
        assert refusal is not None
        await abort(context, grpc.StatusCode.ABORTED, str(refusal), reason=sequence_reason(refusal))
        raise AssertionError("unreachable")


async def _copy(
    lands_at: int | None, sequence: int = 2
) -> tuple[str, list[tuple[int, int]], float]:
    server = grpc.aio.server()
    leader = _Leader(lands_at)
    flotilla_pb2_grpc.add_FlotillaServicer_to_server(leader, server)
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    server.add_insecure_port(address)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    stub = flotilla_pb2_grpc.FlotillaStub(channel)

    async def where(topic: str, partition: int, fresh: bool) -> str:
        return "leader"

    copies = CopyProducer(where, lambda _: stub, attempt_s=2.0)
    batch = encode_batch([(None, b"v", None, 0)] * 2, producer_id=P, base_sequence=sequence)
    started = time.monotonic()
    try:
        response = await copies.copy("t", 0, batch)
        outcome = "duplicate" if response.duplicate else f"written at {response.base_offset}"
    except CopyFailed as error:
        outcome = f"failed: {error}"
    finally:
        await channel.close(None)
        await server.stop(None)
    return outcome, leader.calls, time.monotonic() - started


def test_a_copy_in_flight_is_sent_again_the_same_and_answered_as_a_duplicate() -> None:
    outcome, calls, _ = asyncio.run(_copy(lands_at=2))
    assert calls == [(P, 2), (P, 2)], calls  # never under another producer id
    assert outcome == "duplicate", outcome


def test_a_copy_in_flight_for_long_fails_for_the_caller_to_retry_never_rebased() -> None:
    outcome, calls, took = asyncio.run(_copy(lands_at=None))
    assert outcome.startswith("failed: ") and "in flight" in outcome, outcome
    assert calls == [(P, 2)] * (len(IN_FLIGHT_WAITS_S) + 1), calls
    assert sum(IN_FLIGHT_WAITS_S) <= took < sum(IN_FLIGHT_WAITS_S) + 2.0, took


@pytest.mark.parametrize("lands_at", [1, None])
def test_a_copy_with_a_sequence_missing_is_still_rebased_once(lands_at: int | None) -> None:
    """What the in-flight answer must not change: a gap ahead (sequence 6 while 4 comes next,
    or 2 is still in flight) carries no reason, and the copy goes under its rebased producer,
    at sequence 0 — the harness above sees a rebase when there is one."""
    outcome, calls, _ = asyncio.run(_copy(lands_at=lands_at, sequence=6))
    assert calls == [(P, 6), (rebased_producer_id(P, 6), 0)], calls
    assert outcome.startswith("written at "), outcome
