"""`cluster.topic_latest.latest_spec`: the control plane's latest word on a topic, for a
dead-letter copy that must not count when its topic was deleted behind this node's table (CI:
a controller that had not applied the delete yet vouched for the deleted incarnation).

Real gRPC servers on loopback stand in for the controllers: one trailing (an older version,
still holding the old incarnation), one current, one paused (takes the call, never answers)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from harness import serve_flotilla

from cluster.config import NodeConfig
from cluster.dialmap import DialMap
from cluster.errors import ControlPlaneUnavailable
from cluster.topic_latest import LATEST_TIMEOUT_S, latest_spec
from cluster.topics import TopicAdmin
from cluster.transport import PeerTransport
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

Table = tuple[int, str | None]  # (version, the uid of topic "dlq" there, or None: absent)


class _Controller(flotilla_pb2_grpc.FlotillaServicer):
    def __init__(self, table: Table | None) -> None:
        self.table = table  # None: paused
        self.asked: list[pb.MetadataRequest] = []

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        self.asked.append(request)
        table = self.table
        while table is None:
            await asyncio.Event().wait()  # never answers (cancelled at the caller's deadline)
        version, uid = table
        response = pb.MetadataResponse(topics_version=version)
        if uid is not None:
            topic = pb.TopicInfo(name="dlq", replication_factor=3, uid=uid)
            topic.partitions.append(pb.PartitionInfo(index=0, replicas=["c1", "c2", "c3"]))
            response.topics.append(topic)
        return response


async def _latest(tables: dict[str, Table | None]) -> tuple[str | None, float, list[str]]:
    controllers = {node_id: _Controller(table) for node_id, table in tables.items()}
    servers, addresses = await serve_flotilla(dict(controllers))
    transport = PeerTransport("n9", DialMap(), addresses.get)
    config = NodeConfig(node_id="n9", controllers={c: "127.0.0.1:1" for c in tables})
    admin = TopicAdmin(config, transport, list, lambda: None, None)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        spec = await latest_spec(admin, "dlq")
        took = time.monotonic() - started
        asked = [
            f"{node_id}:{','.join(r.topics)}:{r.topics_only}"
            for node_id, c in sorted(controllers.items())
            for r in c.asked
        ]
        return (spec.uid if spec is not None else None), took, asked
    finally:
        await transport.close()
        for server in servers:
            await server.stop(None)


def test_the_latest_version_wins_over_a_trailing_controller() -> None:
    uid, took, asked = asyncio.run(
        _latest({"c1": (5, "old"), "c2": (6, None), "c3": None})  # deleted at version 6
    )
    assert uid is None, (uid, asked)
    assert took < LATEST_TIMEOUT_S + 0.5, took  # the paused one costs at most the timeout
    assert asked == ["c1:dlq:True", "c2:dlq:True", "c3:dlq:True"]
    uid, _, _ = asyncio.run(_latest({"c1": (5, "old"), "c2": (6, None), "c3": (7, "new")}))
    assert uid == "new"  # recreated at version 7


def test_no_controller_answering_is_an_error_not_an_absence() -> None:
    with pytest.raises(ControlPlaneUnavailable, match="no controller answered for topic 'dlq'"):
        asyncio.run(_latest({"c1": None}))
