"""The node-to-node gRPC service (`flotilla.v1.Peer`): Raft frames and SWIM packets, accepted
only from the cluster's own nodes.

Raft: a stream's caller is authenticated once, at open (`PeerAuth.authenticate`: the
`flotilla-peer` proof, and with mutual TLS the node certificate of the same id); each frame's
sender must then be that node, or the stream ends there. SWIM: each packet's mac and date (and
with mutual TLS the sender's certificate). Anything else changes nothing: UNAUTHENTICATED,
counted in `flotilla_peer_auth_rejected_total{kind}` and logged once per source address.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from cluster.gossip import GossipHost
from cluster.peer_auth import PeerAuth, PeerAuthError
from cluster.transport import PeerTransport, serve_raft_stream
from proto import peer_pb2

__all__ = ["PeerService"]


class PeerService:
    """`flotilla.v1.Peer`; registered with `cluster.transport.peer_handler` (Raft frames arrive
    as bytes, not as protobuf objects). Built with only what it hands the frames to: the
    MultiRaft driver's inbox (`deliver`), the transport, the SWIM host (`gossip`), and the
    checker of peers' proofs (`peer_auth`)."""

    def __init__(
        self,
        node_id: str,
        deliver: Callable[[str, list[tuple[str, bytes | memoryview]]], None],
        transport: PeerTransport,
        gossip: GossipHost,
        peer_auth: PeerAuth,
    ) -> None:
        self.node_id = node_id
        self.deliver = deliver
        self.transport = transport
        self.gossip = gossip
        self.peer_auth = peer_auth

    async def Raft(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[peer_pb2.RaftAck]:
        try:
            sender = self.peer_auth.authenticate(context, "raft")
        except PeerAuthError as error:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(error))
        forged = await serve_raft_stream(
            request_iterator,
            self.node_id,
            self.deliver,
            self.transport.heard_from,
            self.transport.inbox,
            sender=sender,
        )
        if forged is not None:
            reason = f"a raft frame claiming sender {forged!r} on node {sender!r}'s stream"
            self.peer_auth.reject("raft", context.peer(), reason)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        return
        yield  # an async generator that sends nothing back

    async def Swim(
        self, request: peer_pb2.SwimPacket, context: grpc.aio.ServicerContext
    ) -> peer_pb2.SwimAck:
        try:
            self.peer_auth.authenticate_swim(request, context)
        except PeerAuthError as error:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(error))
        self.gossip.receive(request)
        self.transport.heard_from(request.from_node)
        return peer_pb2.SwimAck()
