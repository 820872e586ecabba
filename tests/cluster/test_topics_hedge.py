"""A node that is not a controller polls the controllers for the topic table
(`cluster.topics.TopicAdmin`). A paused controller (SIGSTOP: connections stay open, answers
never come) held every poll for its whole 2 s timeout when it came first in sorted order, for
the seconds until SWIM declared it dead: a topic created meanwhile was unknown there for 2-4 s,
and a request naming it was told NOT_FOUND (CI: test_groups' coordinator paused; its groups
service waits only 2 s for an unknown topic). Now the controller that answered last is asked
first, and one that has not answered within `TOPICS_HEDGE_S` is not waited for alone.

Real gRPC servers on loopback stand in for the controllers; the paused one takes the call and
never answers."""

from __future__ import annotations

import asyncio
import time

import grpc
from harness import serve_flotilla

from cluster.config import NodeConfig
from cluster.dialmap import DialMap
from cluster.topics import TOPICS_HEDGE_S, TopicAdmin
from cluster.transport import PeerTransport
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc


class _Controller(flotilla_pb2_grpc.FlotillaServicer):
    def __init__(self, paused: bool) -> None:
        self.paused = paused
        self.asked = 0

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        self.asked += 1
        if self.paused:
            await asyncio.Event().wait()  # never answers (cancelled at the caller's deadline)
        topic = pb.TopicInfo(name="fresh", replication_factor=1, uid="u1")
        topic.partitions.append(pb.PartitionInfo(index=0, replicas=["c2"]))
        return pb.MetadataResponse(topics=[topic], topics_version=7)


async def _poll_with_c1_paused() -> tuple[float, float, dict[str, int]]:
    controllers = {"c1": _Controller(paused=True), "c2": _Controller(paused=False)}
    servers, addresses = await serve_flotilla(dict(controllers))
    transport = PeerTransport("n9", DialMap(), addresses.get)
    config = NodeConfig(node_id="n9", controllers={"c1": "127.0.0.1:1", "c2": "127.0.0.1:2"})
    admin = TopicAdmin(config, transport, list, lambda: None, None)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        await admin.refresh(now=True)
        first = time.monotonic() - started
        assert "fresh" in admin.topics, admin.topics
        started = time.monotonic()
        await admin.refresh(now=True)
        second = time.monotonic() - started
        return first, second, {n: c.asked for n, c in controllers.items()}
    finally:
        await transport.close()
        for server in servers:
            await server.stop(None)


def test_a_paused_controller_costs_a_poll_at_most_the_hedge() -> None:
    first, second, asked = asyncio.run(_poll_with_c1_paused())
    # the first poll asks c1 (first in order), and c2 too once c1 is TOPICS_HEDGE_S late
    assert TOPICS_HEDGE_S <= 0.5 and first < 1.0, (first, asked)
    # the next asks c2 first, which answered last: c1 is not asked again
    assert second < 0.5 and asked == {"c1": 1, "c2": 2}, (second, asked)
