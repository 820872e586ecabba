"""The node-to-node gRPC service (`flotilla.v1.Peer`): Raft frames and SWIM packets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from cluster.gossip import GossipHost
from cluster.transport import PeerTransport, serve_raft_stream
from proto import peer_pb2

__all__ = ["PeerService"]


class PeerService:
    """`flotilla.v1.Peer`; registered with `cluster.transport.peer_handler` (Raft frames arrive
    as bytes, not as protobuf objects). Built with only what it hands the frames to: the
    MultiRaft driver's inbox (`deliver`), the transport, and the SWIM host (`gossip`)."""

    def __init__(
        self,
        node_id: str,
        deliver: Callable[[str, list[tuple[str, bytes | memoryview]]], None],
        transport: PeerTransport,
        gossip: GossipHost,
    ) -> None:
        self.node_id = node_id
        self.deliver = deliver
        self.transport = transport
        self.gossip = gossip

    async def Raft(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[peer_pb2.RaftAck]:
        await serve_raft_stream(
            request_iterator,
            self.node_id,
            self.deliver,
            self.transport.heard_from,
            self.transport.inbox,
        )
        return
        yield  # an async generator that sends nothing back

    async def Swim(
        self, request: peer_pb2.SwimPacket, context: grpc.aio.ServicerContext
    ) -> peer_pb2.SwimAck:
        self.gossip.receive(request)
        self.transport.heard_from(request.from_node)
        return peer_pb2.SwimAck()
