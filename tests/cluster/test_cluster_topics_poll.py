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


def test_a_poll_of_an_unchanged_table_is_answered_with_its_version_alone(tmp_path: Path) -> None:
    """A node that is not a controller polls one for the topic table every second. It names the
    control-plane version of the table it holds, and a controller whose table is at that
    version answers with the version alone: at 100,000 partitions a full answer is megabytes,
    built and parsed every second by both nodes (issue 28). A change is still answered in full,
    and the node that is not a controller still learns it."""
    with LocalCluster(tmp_path, 3, controllers=2, config_text=CONFIG) as local:
        local.start()
        with Client(local.bootstrap, timeout_s=15) as client:
            client.create_topic("first", 4, 2)
        with grpc.insecure_channel(local.nodes["n1"].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)

            def poll(version: int) -> pb.MetadataResponse:
                response: pb.MetadataResponse = stub.Metadata(
                    pb.MetadataRequest(topics_only=True, topics_version=version), timeout=5
                )
                return response

            full = poll(0)
            assert [t.name for t in full.topics] == ["first"] and full.topics_version > 0, full
            unchanged = poll(full.topics_version)
            assert unchanged.topics_unchanged and not unchanged.topics, unchanged
            assert unchanged.topics_version == full.topics_version
            assert len(unchanged.members) == 3  # the rest of the answer is as before
            with Client(local.nodes["n3"].address, timeout_s=15) as client:
                client.create_topic("second", 2, 2)  # forwarded by n3 to a controller
            changed = poll(full.topics_version)
            assert not changed.topics_unchanged, changed
            assert sorted(t.name for t in changed.topics) == ["first", "second"]
            assert changed.topics_version > full.topics_version
        # n3, no controller, learns a change made through another node by its next polls
        with Client(local.nodes["n1"].address, timeout_s=15) as client:
            client.create_topic("third", 1, 2)
        with grpc.insecure_channel(local.nodes["n3"].address) as channel:
            stub = flotilla_pb2_grpc.FlotillaStub(channel)

            def n3_knows_third() -> bool:
                answer = stub.Metadata(pb.MetadataRequest(), timeout=5)
                return "third" in [t.name for t in answer.topics]

            wait_until(n3_knows_third, 15, "n3 learning of the topic created through n1")
