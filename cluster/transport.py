"""Node-to-node transport: Raft batches on one connection per ordered node pair (a raw TCP link
to the peer's `raft_listen` port, `cluster.raft_link`, or else a gRPC stream on its one port),
SWIM packets as unary gRPC calls.

Raft: `send_raft(to, group, parts)` queues an encoded message (its pieces: an AppendRequest's
entry data are pieces of their own); one sender task per destination drains its queue into one
frame (cluster/frames.py: messages of many groups, up to `max_batch_bytes`, joined with the one
copy of their bytes) and writes it, already serialized, to a long-lived connection. A broken
connection is re-dialled with backoff, cut short by `heard_from` (the peer has just reached us:
a restarted peer hears from its leader at once, not a backoff later); messages queued meanwhile
are dropped once the queue passes its bound — Raft retries by itself, so loss is safe and
memory stays bounded.

Routes (`raft_route`), looked at before every frame (a changed route re-dials):
- the dial map names `<id>/raft`: a raw link to that address (chaos proxies of the raft port);
- else the dial map names `<id>`: the gRPC stream to that address, even when the peer has a raft
  port (a dial map that predates raft ports routes every link through its proxy: bypassing it
  would let Raft cross a chaos partition);
- else the peer advertises a raft address (gossip, `Member.raft_address`): a raw link to it;
- else the gRPC stream to its advertised address (a peer of an earlier release, or one without
  `raft_listen`).

Receiving: `cluster.raft_inbox` (`serve_raft_stream`, `InboxBudget`), for both kinds of
connection: the gRPC stream's (`cluster.peer_service`) and the raw link's (`cluster.raft_link`).

Guarantees: per destination, messages are delivered in the order queued or not at all (one
connection, one writer). Nothing is retried by the transport.

Security (`cluster.peer_channel`): every channel signs every call with the node's
`flotilla-peer` proof (`sign`), and is TLS with the node's certificate when the node has one
(`tls`); after the certificate is reloaded `renew_channels` dials afresh, so new connections
present the new certificate. A raw link carries the same proof in its hello, over TLS with the
same certificate. The receiving side checks a connection's proof once, at open, and then only
that each frame's sender is the node proven (`serve_raft_stream`'s `sender`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import grpc

from cluster.dialmap import DialMap
from cluster.frames import encode_frame
from cluster.peer_channel import dial
from cluster.raft_inbox import InboxBudget, RaftHandler, serve_raft_stream
from cluster.raft_link import TlsContexts, open_link
from cluster.tls import TlsReloader
from proto import peer_pb2, peer_pb2_grpc

__all__ = [
    "InboxBudget",
    "PeerTransport",
    "RaftHandler",
    "RaftRoute",
    "TransportLimits",
    "channel_options",
    "serve_raft_stream",
    "server_options",
]

log = logging.getLogger("flotilla.transport")

# how a destination's Raft frames travel, and to which address
RaftRoute = tuple[Literal["tcp", "grpc"], str]


class _Connection(Protocol):
    """One sender's connection: a gRPC stream call or a raw link (`cluster.raft_link`)."""

    def done(self) -> bool: ...

    async def write(self, frame: bytes) -> object: ...

    def cancel(self) -> object: ...


_RAFT_METHOD = "/flotilla.v1.Peer/Raft"


@dataclass(frozen=True, slots=True)
class TransportLimits:
    max_batch_bytes: int = 4 * 1024 * 1024  # one frame
    max_queue_bytes: int = 64 * 1024 * 1024  # per destination, beyond which messages drop
    max_inbox_bytes: int = 64 * 1024 * 1024  # received, not yet taken: beyond, frames drop
    max_message_bytes: int = 16 * 1024 * 1024  # gRPC message limit
    reconnect_initial_s: float = 0.05
    reconnect_max_s: float = 1.0
    swim_timeout_s: float = 1.0


LOOKAHEAD_BYTES = 16 * 1024 * 1024
_RECEIVE_LIMIT = "grpc.max_receive_message_length"


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # a channel of its own connection: a renewed channel (`_renew_channel`) must not share
        # the failed one's connection and its reconnect backoff
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # accept the peers' keepalive pings (every 10 s) instead of answering GOAWAY
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        # the receive window a stream offers: with the default 64 KiB a 1 MiB batch waits for
        # sixteen window updates (measured: 3.2 ms per 1 MiB message against 1.6 ms with this)
        ("grpc.http2.lookahead_bytes", LOOKAHEAD_BYTES),
    ]


def server_options(
    max_message_bytes: int, max_receive_bytes: int = 0, max_streams_per_connection: int = 256
) -> list[tuple[str, int]]:
    """The node's gRPC server: the channel options; no SO_REUSEPORT (gRPC's default is on, so a
    second server on a port in use would start without error and take some of the connections:
    see `cluster.ownership`); and a bound on one connection's concurrent streams (HTTP/2's
    SETTINGS_MAX_CONCURRENT_STREAMS: a client's further calls wait on its side, costing this
    node nothing; one that races another's end may be refused, UNAVAILABLE, which the SDK
    retries). `max_receive_bytes`: the largest request taken (0: `max_message_bytes`);
    gRPC refuses a larger one from its length prefix, before buffering it."""
    receive = max_receive_bytes or max_message_bytes
    return [
        *(o for o in channel_options(max_message_bytes) if o[0] != _RECEIVE_LIMIT),
        (_RECEIVE_LIMIT, receive),
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", max_streams_per_connection),
    ]


class _Outbox:
    """Pending messages for one destination and the task that sends them."""

    def __init__(self) -> None:
        self.queue: deque[tuple[bytes, Sequence[bytes], int]] = deque()  # group, parts, size
        self.bytes = 0
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.failures = 0  # consecutive failed streams (logged once per outage)
        self.redial = asyncio.Event()  # `heard_from` while the sender waits out a backoff


class PeerTransport:
    def __init__(
        self,
        self_id: str,
        dial_map: DialMap,
        advertised: Callable[[str], str | None],
        limits: TransportLimits | None = None,
        *,
        sign: Callable[[], str] | None = None,
        tls: TlsReloader | None = None,
        advertised_raft: Callable[[str], str | None] = lambda member_id: None,
    ) -> None:
        """`sign`: the node's call proof (`PeerAuth.sign_call`); `tls`: its certificate;
        `advertised_raft`: a member's raft address (None: it takes Raft over gRPC only)."""
        self.self_id = self_id
        self.sign = sign
        self.tls = tls
        self.tls_contexts = None if tls is None else TlsContexts(tls)
        self.advertised_raft = advertised_raft
        self._retiring: set[asyncio.Task[None]] = set()
        self.dial_map = dial_map
        self.advertised = advertised
        self.limits = limits or TransportLimits()
        self.inbox = InboxBudget(self.limits.max_inbox_bytes)
        self._outboxes: dict[str, _Outbox] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closed = False
        self._sequence = 0

    # -- addresses ---------------------------------------------------------------------------
    def address_of(self, member_id: str) -> str | None:
        advertised = self.advertised(member_id)
        routed = self.dial_map.address_for(member_id, advertised or "")
        return routed or None

    def raft_route(self, member_id: str) -> RaftRoute | None:
        """How Raft frames for `member_id` travel now (see the module docstring); None: no
        address known."""
        routes = self.dial_map.routes_view()
        routed = routes.get(f"{member_id}/raft")
        if routed:
            return ("tcp", routed)
        if member_id not in routes:
            raft_address = self.advertised_raft(member_id)
            if raft_address:
                return ("tcp", raft_address)
        address = self.address_of(member_id)
        return ("grpc", address) if address else None

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            options = channel_options(self.limits.max_message_bytes)
            channel = dial(address, options, self.sign, self.tls)
            self._channels[address] = channel
        return channel

    def renew_channels(self, grace_s: float = 5.0) -> None:
        """New channels from now on (the certificate was reloaded): calls under way finish on
        the old ones within `grace_s`; a Raft stream cut then re-dials on a new channel."""
        old = list(self._channels.values())
        self._channels.clear()
        for channel in old:
            task = asyncio.get_running_loop().create_task(channel.close(grace=grace_s))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    # -- Raft ------------------------------------------------------------------------------------
    def send_raft(self, to: str, group: str, parts: Sequence[bytes]) -> None:
        """Queues one encoded message (`parts` joined are its payload) for `to`."""
        if self._closed:
            return
        outbox = self._outboxes.get(to)
        if outbox is None:
            outbox = self._outboxes[to] = _Outbox()
        if outbox.task is None or outbox.task.done():
            outbox.task = asyncio.get_running_loop().create_task(self._sender(to, outbox))
        size = sum(len(part) for part in parts)
        if outbox.bytes + size > self.limits.max_queue_bytes:
            outbox.dropped += 1
            return
        outbox.queue.append((group.encode(), parts, size))
        outbox.bytes += size
        outbox.ready.set()

    def _take_frame(self, to: str, outbox: _Outbox) -> bytes:
        """The next frame for `to`: queued messages up to `max_batch_bytes`, or one message if
        it alone is larger. So a frame is never larger than max(max_batch_bytes, the largest
        message), which the receiver's gRPC message limit is sized for (cluster.ingress)."""
        messages: list[tuple[bytes, Sequence[bytes], int]] = []
        size = 0
        while outbox.queue:
            group, _parts, message_size = outbox.queue[0]
            grown = size + message_size + len(group) + 6
            if messages and grown > self.limits.max_batch_bytes:
                break
            message = outbox.queue.popleft()
            outbox.bytes -= message_size
            size = grown
            messages.append(message)
        if not outbox.queue:
            outbox.ready.clear()
        self._sequence += 1
        return encode_frame(self._sequence, self.self_id, to, messages)

    async def _sender(self, to: str, outbox: _Outbox) -> None:
        backoff = self.limits.reconnect_initial_s
        while not self._closed:
            route = self.raft_route(to)
            if route is None:
                await asyncio.sleep(backoff)
                outbox.queue.clear()
                outbox.bytes = 0
                continue
            connection: _Connection | None = None
            try:
                while not self._closed:
                    await outbox.ready.wait()
                    if self.raft_route(to) != route:
                        break  # the dial map or the advertised address changed: re-dial
                    # none yet, or it ended while idle (the peer restarted, or is down): a new
                    # one, for the queued messages
                    if connection is None or connection.done():
                        if connection is not None:
                            connection.cancel()
                        connection = None
                        connection = await self._connect(route, to)
                    await connection.write(self._take_frame(to, outbox))
                    backoff = self.limits.reconnect_initial_s
                    outbox.failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure: drop the connection and dial again
                outbox.failures += 1
                level = logging.INFO if outbox.failures == 1 else logging.DEBUG
                kind, address = route
                log.log(level, "raft %s to %s (%s) broke: %s", kind, to, address, _brief(error))
            finally:
                if connection is not None:
                    connection.cancel()
            # messages queued while the connection was down are stale; Raft resends what matters
            outbox.queue.clear()
            outbox.bytes = 0
            outbox.ready.clear()
            outbox.redial.clear()
            try:
                await asyncio.wait_for(outbox.redial.wait(), backoff)
            except TimeoutError:
                backoff = min(backoff * 2, self.limits.reconnect_max_s)
            else:  # the peer is back: dial now, on a channel not waiting out its own backoff
                backoff = self.limits.reconnect_initial_s
                if route[0] == "grpc":
                    await self._renew_channel(route[1])

    async def _connect(self, route: RaftRoute, to: str) -> _Connection:
        kind, address = route
        if kind == "grpc":
            return self._open_stream(address)
        proof = self.sign() if self.sign is not None else ""
        return await open_link(address, self.self_id, to, proof, self.tls_contexts)

    def _open_stream(self, address: str) -> grpc.aio.StreamStreamCall:
        # frames are written already serialized (request_serializer=None: bytes as-is)
        call: grpc.aio.StreamStreamCall = self.channel(address).stream_stream(
            _RAFT_METHOD, response_deserializer=peer_pb2.RaftAck.FromString
        )()
        return call

    def heard_from(self, member_id: str) -> None:
        """`member_id` has just reached this node (a new Raft stream, a SWIM packet): if the
        stream to it is down, dial again now rather than when the backoff ends."""
        outbox = self._outboxes.get(member_id)
        if outbox is not None:
            outbox.redial.set()

    async def _renew_channel(self, address: str) -> None:
        """Replaces the channel to `address` if it is in TRANSIENT_FAILURE: gRPC fails every
        call on it at once until its own reconnect backoff ends."""
        channel = self._channels.get(address)
        failed = grpc.ChannelConnectivity.TRANSIENT_FAILURE
        if channel is not None and channel.get_state() is failed:
            del self._channels[address]
            await channel.close(grace=None)

    # -- SWIM --------------------------------------------------------------------------------------
    async def send_swim(self, address: str, packet: peer_pb2.SwimPacket) -> bool:
        if self._closed:
            return False
        try:
            stub = peer_pb2_grpc.PeerStub(self.channel(address))
            await stub.Swim(packet, timeout=self.limits.swim_timeout_s)
            return True
        except grpc.aio.AioRpcError:
            return False

    # -- lifecycle -------------------------------------------------------------------------------
    async def close(self) -> None:
        self._closed = True
        tasks = [o.task for o in self._outboxes.values() if o.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        for retiring in list(self._retiring):
            retiring.cancel()


def peer_handler(
    raft: Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext], AsyncIterator[object]],
    swim: Callable[[peer_pb2.SwimPacket, grpc.aio.ServicerContext], Awaitable[peer_pb2.SwimAck]],
) -> grpc.GenericRpcHandler:
    """The `flotilla.v1.Peer` service, with Raft frames handed over as the received bytes
    (no protobuf object: `parse_frame` reads RaftFrame's encoding itself)."""
    return grpc.method_handlers_generic_handler(
        "flotilla.v1.Peer",
        {
            "Raft": grpc.stream_stream_rpc_method_handler(
                raft, response_serializer=peer_pb2.RaftAck.SerializeToString
            ),
            "Swim": grpc.unary_unary_rpc_method_handler(
                swim,
                request_deserializer=peer_pb2.SwimPacket.FromString,
                response_serializer=peer_pb2.SwimAck.SerializeToString,
            ),
        },
    )


def _brief(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error)
