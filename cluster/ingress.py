"""Admission of produce requests: memory under a produce flood stays bounded.

gRPC reads every request it takes into memory before any handler sees it: measured, 32
concurrent 7 MiB produce requests, refused by the handler (larger than max_batch_bytes), grew a
node by ~600 MiB (gRPC's buffers, then the request objects), and glibc kept the memory after.
So the server's gRPC limit is the largest request a node needs (`max_request_bytes`, not the
16 MiB `max_message_bytes` of responses): gRPC refuses a larger one from its length prefix,
unbuffered. Within that limit, `ProduceGate` bounds what admitted produce calls hold: it wraps the Produce
method as a stream handler, which runs when the call starts, before its message is read, and
admits the call only while

    in-flight produce calls < max_inflight_produce, and
    in-flight bytes + max_request_bytes <= max_inflight_request_bytes,

where in-flight bytes counts each admitted call at `max_request_bytes` until its message has
arrived and at the message's size after that, until the call ends (the batch stays alive while
it waits for its commit). A refused call gets RESOURCE_EXHAUSTED naming the limit, with the
reason OVERLOADED in its trailing metadata (proto/reasons.py) so a client backs off and retries
it rather than taking it for bad input, and its stream is closed unread, so gRPC drops whatever
of it was already buffered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from proto.reasons import OVERLOADED, REASON_KEY

__all__ = ["PRODUCE_METHOD", "ProduceGate", "ProduceLimits", "max_request_bytes"]

PRODUCE_METHOD = "/flotilla.v1.Flotilla/Produce"
# what a request holds beyond its batch or its Raft messages' entries: names, ids, headers
REQUEST_OVERHEAD_BYTES = 64 * 1024


def max_request_bytes(
    max_batch_bytes: int, frame_bytes: int, max_append_bytes: int, max_message_bytes: int
) -> int:
    """The largest request a node must take, which its gRPC server limit is set to: a produce
    carries one batch (<= max_batch_bytes); a Raft frame is at most `frame_bytes` of messages
    or one message (`PeerTransport._take_frame`), and an AppendRequest carries entries up to
    `max_append_bytes` or one entry, itself one batch. gRPC refuses a larger request from its
    length prefix, before buffering it: measured, 32 concurrent 15 MiB produce requests grew
    a node by ~1.1 GiB under the 16 MiB limit and by ~80 MiB under an 8 MiB one."""
    largest = max(max_batch_bytes, frame_bytes, max_append_bytes) + REQUEST_OVERHEAD_BYTES
    return min(largest, max_message_bytes)


@dataclass(frozen=True, slots=True)
class ProduceLimits:
    max_inflight_produce: int  # produce calls admitted at once, per node
    max_inflight_request_bytes: int  # their bytes (see the module docstring), per node
    max_request_bytes: int  # the largest request gRPC accepts: an arriving call's reservation


class ProduceGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, node_id: str, limits: ProduceLimits) -> None:
        self.node_id = node_id
        self.limits = limits
        self.calls = 0
        self.bytes = 0
        self.refused = 0

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler_call_details.method != PRODUCE_METHOD or handler is None:
            return handler
        inner = handler.unary_unary
        parse = handler.request_deserializer

        def sized(data: bytes) -> tuple[Any, int]:
            # the request's size is its bytes on the wire: asking the parsed message
            # (`ByteSize`) re-encodes it, ~0.1 ms for a 1 MiB batch on the event loop
            return (parse(data) if parse is not None else data), len(data)

        async def admitted(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            refusal = self._refusal()
            if refusal:
                self.refused += 1
                context.set_trailing_metadata(((REASON_KEY, OVERLOADED),))
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
            reserved = self.limits.max_request_bytes
            self.calls += 1
            self.bytes += reserved
            try:
                arrived: tuple[Any, int] | None = None
                async for message in requests:
                    arrived = message
                    break
                if arrived is None:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no produce request")
                    raise AssertionError("unreachable: abort raises")
                request, size = arrived
                self.bytes -= reserved - size
                reserved = size
                return await inner(request, context)
            finally:
                self.calls -= 1
                self.bytes -= reserved

        return grpc.stream_unary_rpc_method_handler(
            admitted,
            request_deserializer=sized,
            response_serializer=handler.response_serializer,
        )

    def _refusal(self) -> str:
        limits = self.limits
        if self.calls >= limits.max_inflight_produce:
            return (
                f"node {self.node_id} has {self.calls} produce requests in flight, its limit "
                f"(max_inflight_produce={limits.max_inflight_produce}): retry after a backoff"
            )
        if self.bytes + limits.max_request_bytes > limits.max_inflight_request_bytes:
            return (
                f"node {self.node_id} has {self.bytes} bytes of produce requests in flight; "
                f"another could take it past max_inflight_request_bytes="
                f"{limits.max_inflight_request_bytes} (each counts as {limits.max_request_bytes} "
                "bytes, the largest request, until it has arrived): retry after a backoff"
            )
        return ""
