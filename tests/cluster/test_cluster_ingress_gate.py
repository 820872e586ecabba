"""`ProduceGate` on a real gRPC server in this process: produce calls beyond the node's limits
are refused with RESOURCE_EXHAUSTED naming the limit, and the gate's counts return to zero."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cluster.ingress import ProduceGate, ProduceLimits, max_request_bytes
from cluster.transport import server_options
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.reasons import OVERLOADED, REASON_KEY


class _HeldProduce(flotilla_pb2_grpc.FlotillaServicer):
    """Produce calls wait until released, as calls waiting for their commit do."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        self.entered += 1
        await self.release.wait()
        return pb.ProduceResponse(record_count=len(request.batch))


async def _scenario(
    limits: ProduceLimits, calls: int, batch_bytes: int
) -> tuple[list[str], ProduceGate]:
    gate = ProduceGate("n1", limits)
    server = grpc.aio.server(interceptors=(gate,))
    held = _HeldProduce()
    flotilla_pb2_grpc.add_FlotillaServicer_to_server(held, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    outcomes: list[str] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)
            request = pb.ProduceRequest(topic="t", batch=b"x" * batch_bytes)
            pending = [
                asyncio.ensure_future(stub.Produce(request, timeout=10)) for _ in range(calls)
            ]
            deadline = asyncio.get_running_loop().time() + 10
            while held.entered + gate.refused < calls:
                assert asyncio.get_running_loop().time() < deadline, (held.entered, gate.refused)
                await asyncio.sleep(0.01)
            held.release.set()
            for call in pending:
                try:
                    response = await call
                    outcomes.append(f"OK {response.record_count}")
                except grpc.aio.AioRpcError as error:
                    reasons = [v for k, v in error.trailing_metadata() or () if k == REASON_KEY]
                    outcomes.append(f"{error.code().name} {reasons} {error.details()}")
    finally:
        await server.stop(0)
    return outcomes, gate


@pytest.mark.parametrize(
    ("limits", "batch_bytes", "named"),
    [
        (ProduceLimits(2, 1 << 30, 4096), 1000, "max_inflight_produce=2"),
        # two calls that have arrived hold ~8000 bytes: a third, counted at 4096 until it
        # arrives, would pass 8192
        (ProduceLimits(100, 2 * 4096, 4096), 4000, "max_inflight_request_bytes=8192"),
    ],
)
def test_produce_calls_beyond_the_limits_are_refused(
    limits: ProduceLimits, batch_bytes: int, named: str
) -> None:
    outcomes, gate = asyncio.run(_scenario(limits, 3, batch_bytes))
    assert sorted(o.split(" ")[0] for o in outcomes) == ["OK", "OK", "RESOURCE_EXHAUSTED"]
    refusal = next(o for o in outcomes if o.startswith("RESOURCE_EXHAUSTED"))
    assert named in refusal, refusal
    assert f"[{OVERLOADED!r}]" in refusal, refusal  # the SDK retries it, after a backoff
    assert f"OK {batch_bytes}" in outcomes
    assert (gate.calls, gate.bytes, gate.refused) == (0, 0, 1)


def test_the_request_limit_fits_the_largest_request_a_node_needs() -> None:
    mib = 1024 * 1024
    # default: 4 MiB batches and frames, 1 MiB appends, within the 16 MiB message limit
    assert max_request_bytes(4 * mib, 4 * mib, mib, 16 * mib) == 4 * mib + 64 * 1024
    assert max_request_bytes(8 * mib, 4 * mib, mib, 16 * mib) == 8 * mib + 64 * 1024
    assert max_request_bytes(16 * mib - 4096, 4 * mib, mib, 16 * mib) == 16 * mib


def test_one_connection_has_at_most_max_streams_per_connection_calls_open() -> None:
    """The per-connection bound (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a client's further
    calls wait on its side, so the node holds no more of them. One that starts as another ends
    may race the server's count and be refused (RST_STREAM REFUSED_STREAM: UNAVAILABLE, which
    the SDK retries); none is lost silently."""

    async def scenario() -> tuple[int, list[str]]:
        server = grpc.aio.server(options=server_options(1 << 20, 0, max_streams_per_connection=2))
        held = _HeldProduce()
        flotilla_pb2_grpc.add_FlotillaServicer_to_server(held, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        loop = asyncio.get_running_loop()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                request = pb.ProduceRequest(topic="t", batch=b"x")
                # the connection's settings are known to the client once a call went through
                # (calls racing the very first SETTINGS frame are refused: UNAVAILABLE)
                held.release.set()
                await stub.Produce(request, timeout=20)
                held.release.clear()
                held.entered = 0
                calls = [asyncio.ensure_future(stub.Produce(request, timeout=20)) for _ in range(4)]
                deadline = loop.time() + 10
                while held.entered < 2:
                    assert loop.time() < deadline, held.entered
                    await asyncio.sleep(0.01)
                most = held.entered
                watch_until = loop.time() + 0.5  # it must not grow: watched for a while
                while loop.time() < watch_until:
                    most = max(most, held.entered)
                    await asyncio.sleep(0.01)
                held.release.set()
                outcomes = []
                for call in calls:
                    try:
                        outcomes.append(f"OK {(await call).record_count}")
                    except grpc.aio.AioRpcError as error:
                        assert error.code() is grpc.StatusCode.UNAVAILABLE, error
                        assert "RST_STREAM" in (error.details() or ""), error
                        outcomes.append("refused")
        finally:
            await server.stop(0)
        return most, outcomes

    most, outcomes = asyncio.run(scenario())
    assert most == 2
    assert outcomes.count("OK 1") >= 2, outcomes  # at least the two the server held
    assert set(outcomes) <= {"OK 1", "refused"}, outcomes


class _NoReencode:
    """A parsed produce request that must not be re-encoded to learn its size."""

    def __init__(self, data: bytes) -> None:
        self.request = pb.ProduceRequest.FromString(data)

    def ByteSize(self) -> int:
        raise AssertionError("the gate re-encoded the request to size it (ByteSize)")


def test_the_gate_counts_a_request_at_its_size_on_the_wire_without_re_encoding_it() -> None:
    """An admitted call counts as its bytes on the wire, taken as they arrive: asking the
    parsed message (`ByteSize`) re-encodes it (~0.1 ms for a 1 MiB batch, on the loop)."""

    async def scenario() -> tuple[list[int], int, ProduceGate]:
        gate = ProduceGate("n1", ProduceLimits(10, 1 << 30, 1 << 20))
        held: list[int] = []
        release = asyncio.Event()

        async def produce(request: _NoReencode, context: grpc.aio.ServicerContext) -> bytes:
            held.append(gate.bytes)
            await release.wait()
            answer = pb.ProduceResponse(record_count=len(request.request.batch))
            serialized: bytes = answer.SerializeToString()
            return serialized

        handler = grpc.method_handlers_generic_handler(
            "flotilla.v1.Flotilla",
            {"Produce": grpc.unary_unary_rpc_method_handler(produce, _NoReencode)},
        )
        server = grpc.aio.server(interceptors=(gate,))
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        request = pb.ProduceRequest(topic="t", partition=2, batch=b"x" * 300_000)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)
                calls = [asyncio.ensure_future(stub.Produce(request, timeout=10)) for _ in (1, 2)]
                deadline = asyncio.get_running_loop().time() + 10
                while len(held) < 2:
                    assert asyncio.get_running_loop().time() < deadline, held
                    assert not any(call.done() for call in calls), [c.result() for c in calls]
                    await asyncio.sleep(0.01)
                in_flight = gate.bytes
                release.set()
                counts = [(await call).record_count for call in calls]
        finally:
            await server.stop(0)
        return counts, in_flight, gate

    counts, in_flight, gate = asyncio.run(scenario())
    wire = len(pb.ProduceRequest(topic="t", partition=2, batch=b"x" * 300_000).SerializeToString())
    assert counts == [300_000, 300_000]
    assert in_flight == 2 * wire  # both arrived: each at its exact size, no reservation left
    assert (gate.calls, gate.bytes, gate.refused) == (0, 0, 0)
