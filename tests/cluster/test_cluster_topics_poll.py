"""A node polls a controller for the topic table when its own control plane has not caught up
(`cluster.topics`). A controller that has not loaded the table itself (restarted, its control
plane without a quorum yet) must not answer that poll with an empty table: the poller would take
it as "no topics" and answer its clients "topic does not exist" for topics that exist (seen in
test_producer_ids after every replica of a partition restarted). It answers UNAVAILABLE, and the
poller asks another controller or polls again."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"


def test_a_controller_that_has_not_loaded_the_topics_refuses_the_poll(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, controllers=3, config_text=CONFIG) as local:
        local.start()
        with Client(local.bootstrap, timeout_s=15) as client:
            client.create_topic("kept", 1, 3)
        for node_id in ("n1", "n2", "n3"):
            local.stop(node_id)
        local.start("n1")  # alone: its control plane has no quorum, nobody else to ask
        address = local.nodes["n1"].address
        with grpc.insecure_channel(address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)

            def poll() -> pb.MetadataResponse:
                response: pb.MetadataResponse = stub.Metadata(
                    pb.MetadataRequest(topics_only=True), timeout=5
                )
                return response

            with pytest.raises(grpc.RpcError) as refused:
                poll()
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
            assert "not loaded" in (refused.value.details() or "")
            local.start("n2")  # a quorum again: the table is loaded, and the poll answered

            def answered() -> bool:
                try:
                    return [t.name for t in poll().topics] == ["kept"]
                except grpc.RpcError:
                    return False

            wait_until(answered, 30, "n1 answers the poll with the topic table")
