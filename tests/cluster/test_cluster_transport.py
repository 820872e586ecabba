"""PeerTransport against real gRPC servers on loopback: delivery, and redialling a restarted peer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import grpc
import pytest

from cluster.dialmap import DialMap
from cluster.frames import encode_frame
from cluster.transport import (
    InboxBudget,
    PeerTransport,
    TransportLimits,
    peer_handler,
    serve_raft_stream,
)
from proto import peer_pb2

SLOW = 60.0  # a reconnect backoff far longer than any deadline below


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Peer:
    """A node's Peer service that records the Raft payloads it receives."""

    def __init__(self, node_id: str, address: str, opened=lambda sender: None) -> None:  # type: ignore[no-untyped-def]
        self.node_id, self.address, self.opened = node_id, address, opened
        self.received: list[bytes] = []
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        async def raft(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[object]:
            await serve_raft_stream(requests, self.node_id, self._deliver, self.opened)
            return
            yield

        async def swim(packet: peer_pb2.SwimPacket, context: object) -> peer_pb2.SwimAck:
            return peer_pb2.SwimAck()

        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((peer_handler(raft, swim),))
        self.server.add_insecure_port(self.address)
        await self.server.start()

    def _deliver(self, sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        self.received.extend(bytes(payload) for _, payload in messages)

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.stop(None)


async def _until(condition, what: str, timeout_s: float = 10.0, poke=None) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        if poke is not None:
            poke()
        await asyncio.sleep(0.02)


def _transport(peer: Peer, limits: TransportLimits) -> PeerTransport:
    return PeerTransport("a", DialMap(), {peer.node_id: peer.address}.get, limits)


async def _restart_while_backing_off(heard: bool, timeout_s: float) -> None:
    """Node a sends to b; b restarts while a backs off; with `heard`, the restarted b opens a
    stream to a (as it does to send its first Raft message), which a takes as news of b."""
    peer = Peer("b", f"127.0.0.1:{_free_port()}")
    await peer.start()
    transport = _transport(peer, TransportLimits(reconnect_initial_s=SLOW, reconnect_max_s=SLOW))
    a = Peer("a", f"127.0.0.1:{_free_port()}", opened=transport.heard_from)
    await a.start()
    try:
        transport.send_raft("b", "g", [b"first"])
        await _until(lambda: peer.received == [b"first"], "the first message arrives")
        await peer.stop()
        # keep sending until the sender has seen the stream break and is backing off
        outbox = transport._outboxes["b"]
        await _until(
            lambda: outbox.failures > 0,
            "the broken stream is noticed",
            poke=lambda: transport.send_raft("b", "g", [b"lost"]),
        )
        # and until its channel has failed to reconnect (connection refused): gRPC then fails
        # calls on it at once for a backoff of its own
        channel = transport.channel(peer.address)
        failed = grpc.ChannelConnectivity.TRANSIENT_FAILURE
        await _until(
            lambda: channel.get_state(try_to_connect=True) is failed, "the channel has failed"
        )
        restarted = Peer("b", peer.address)
        await restarted.start()
        b_transport = PeerTransport("b", DialMap(), {"a": a.address}.get)
        try:
            if heard:
                b_transport.send_raft("a", "g", [b"vote for me"])
                await _until(lambda: b"vote for me" in a.received, "b's message reaches a")
            await _until(
                lambda: b"again" in restarted.received,
                "a message reaches the restarted peer",
                timeout_s=timeout_s,
                poke=lambda: transport.send_raft("b", "g", [b"again"]),
            )
        finally:
            await b_transport.close()
            await restarted.stop()
    finally:
        await transport.close()
        await a.stop()


def test_delivers_messages_in_order() -> None:
    async def run() -> None:
        peer = Peer("b", f"127.0.0.1:{_free_port()}")
        await peer.start()
        transport = _transport(peer, TransportLimits())
        try:
            for number in range(100):
                transport.send_raft("b", f"g{number % 3}", [b"m", str(number).encode()])
            expected = [b"m" + str(n).encode() for n in range(100)]
            await _until(lambda: peer.received == expected, "all 100 messages, in order")
        finally:
            await transport.close()
            await peer.stop()

    asyncio.run(run())


def test_a_restarted_peer_that_reaches_us_is_redialled_at_once() -> None:
    """The backoff (60 s) outlasts the deadline (10 s): only `heard_from` gets the message
    through in time."""
    asyncio.run(_restart_while_backing_off(heard=True, timeout_s=10.0))


def test_without_news_of_the_peer_the_backoff_holds() -> None:
    """The check above can fail: with no `heard_from`, the sender waits out its backoff (60 s)."""
    with pytest.raises(AssertionError, match="reaches the restarted peer"):
        asyncio.run(_restart_while_backing_off(heard=False, timeout_s=3.0))


def _frame(sequence: int, payload: bytes) -> bytes:
    return encode_frame(sequence, "a", "b", [(b"g", [payload], len(payload))])


async def _frames(frames: list[bytes]) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame


def test_frames_past_the_inbox_budget_are_dropped_until_the_driver_takes_its_inputs() -> None:
    frames = [_frame(n, bytes([n]) * 1000) for n in range(1, 5)]
    inbox = InboxBudget(2 * len(frames[0]))
    delivered: list[bytes] = []

    def deliver(sender: str, messages: list[tuple[str, bytes | memoryview]]) -> None:
        delivered.extend(bytes(payload[:1]) for _, payload in messages)

    asyncio.run(serve_raft_stream(_frames(frames[:3]), "b", deliver, inbox=inbox))
    assert delivered == [b"\x01", b"\x02"]  # the third frame found the budget spent
    assert (inbox.bytes, inbox.dropped) == (2 * len(frames[0]), 1)
    inbox.taken()  # the driver's round took them
    asyncio.run(serve_raft_stream(_frames(frames[3:]), "b", deliver, inbox=inbox))
    assert delivered == [b"\x01", b"\x02", b"\x04"]
    # a frame larger than the whole budget still passes when nothing else waits
    inbox.taken()
    big = _frame(9, b"\x09" * (4 * len(frames[0])))
    asyncio.run(serve_raft_stream(_frames([big]), "b", deliver, inbox=inbox))
    assert delivered[-1] == b"\x09" and inbox.dropped == 1


def test_a_frame_holds_messages_up_to_max_batch_bytes_or_one_larger_message() -> None:
    """The receiver's gRPC limit is sized for this (cluster.ingress.max_request_bytes)."""

    async def scenario() -> list[int]:
        limits = TransportLimits(max_batch_bytes=1000)
        transport = PeerTransport("a", DialMap(), lambda member: None, limits)
        for size in (400, 400, 400, 3000, 100, 100):
            transport.send_raft("b", "g", [b"x" * size])
        outbox = transport._outboxes["b"]
        sizes = []
        while outbox.queue:  # before the sender task first runs
            frame = transport._take_frame("b", outbox)
            sizes.append(len(frame))
        await transport.close()
        return sizes

    sizes = asyncio.run(scenario())
    assert len(sizes) == 4, sizes  # [400, 400] [400] [3000] [100, 100]
    assert all(size <= 1000 + 64 for size in sizes[:2] + sizes[3:]), sizes
    assert 3000 < sizes[2] <= 3000 + 64, sizes
