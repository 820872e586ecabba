"""Topic retention on real processes: each replica removes whole sealed segments past the topic's
`retention_bytes` or older than its `retention_ms`; reads below a replica's log start are
OUT_OF_RANGE; a follower that was down while the leader's log moved on past it is reset to the
leader's log start and catches up from there."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client, InvalidArgument, OffsetOutOfRange, TopicNotFound
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

pytestmark = pytest.mark.integration

# 16 KiB segments, retention applied every 0.2 s
CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
    "segment_bytes = 16384\nretention_check_s = 0.2\n"
)
VALUE = b"r" * 1000


def _holds_tail(client: Client, topic: str, replica: str, start: int, end: int) -> bool:
    records = []
    offset = start
    while offset < end:
        batch = client.read(topic, 0, offset, 1000, replica=replica)
        if not batch:
            return False
        records.extend(batch)
        offset = batch[-1].offset + 1
    return [r.offset for r in records] == list(range(start, end)) and all(
        r.value == VALUE for r in records
    )


def test_retention_bounds_every_replica_and_resets_a_follower_left_behind(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path, 3, config_text=CONFIG) as local:
        local.start()
        with Client(local.addresses(), timeout_s=30) as client:
            sized = client.create_topic("sized", 1, 3, retention_bytes=48 * 1024)
            assert (sized.retention_bytes, sized.retention_ms) == (48 * 1024, 0)
            client.create_topic("aged", 1, 3, retention_ms=500)
            info = client.describe_topic("sized").partitions[0]
            wait_until(lambda: client.describe_topic("sized").partitions[0].leader, 30, "a leader")
            leader = client.describe_topic("sized").partitions[0].leader
            follower = next(r for r in info.replicas if r != leader)
            local.kill(follower)
            for _ in range(20):
                client.produce_batch("sized", [VALUE] * 10, partition=0)
                client.produce_batch("aged", [VALUE] * 10, partition=0)
            end = 200

            def start_of(topic: str) -> int:
                client.refresh([topic])
                return client.describe_topic(topic).partitions[0].log_start

            # the leader keeps about 48 KiB (plus its active segment): far less than 200 KiB
            wait_until(lambda: start_of("sized") >= 100, 30, "sized's log start to move on")
            wait_until(lambda: start_of("aged") >= 150, 30, "aged's old segments to go")
            sized_start = start_of("sized")
            with pytest.raises(OffsetOutOfRange, match="out of range"):
                client.read("sized", 0, 0, 10, replica=leader)
            assert _holds_tail(client, "sized", leader, sized_start, end)
            size = sum(
                f.stat().st_size
                for f in (tmp_path / leader / "partitions" / "sized" / "0").rglob("*.log")
            )
            assert size < 100 * 1024, size

            # the follower comes back behind the leader's log start: reset, then caught up
            local.start(follower)
            wait_until(
                lambda: _holds_tail(client, "sized", follower, start_of("sized"), end),
                60,
                f"{follower} to hold sized/0 from the leader's log start",
            )
            with pytest.raises(OffsetOutOfRange):
                client.read("sized", 0, 0, 10, replica=follower)
            client.produce("sized", VALUE, partition=0)  # and the group takes writes


def test_retention_altered_later_applies_and_bad_changes_change_nothing(tmp_path: Path) -> None:
    """Kafka's `kafka-configs --alter`: a topic made without retention gets one, through a node
    that is not a controller (it forwards), and every replica applies it."""
    with LocalCluster(tmp_path, 2, controllers=1, config_text=CONFIG) as local:
        local.start()
        non_controller = local.addresses()[1]
        with Client(non_controller, timeout_s=30) as client:
            client.create_topic("grown", 1, 2)
            for _ in range(20):
                client.produce_batch("grown", [VALUE] * 10, partition=0)
            with pytest.raises(TopicNotFound, match="'missing' does not exist"):
                client.alter_topic("missing", retention_ms=1)
            with pytest.raises(InvalidArgument, match="retention_bytes=-1 is invalid"):
                client.alter_topic("grown", retention_bytes=-1)
            with pytest.raises(
                InvalidArgument,
                match="needs partitions, retention_bytes, retention_ms or max_delay_ms",
            ):
                client.alter_topic("grown")
            info = client.describe_topic("grown")
            assert (info.retention_bytes, info.retention_ms) == (0, 0)
            assert info.partitions[0].log_start == 0

            altered = client.alter_topic("grown", retention_bytes=48 * 1024)
            assert (altered.retention_bytes, altered.retention_ms) == (48 * 1024, 0)

            wait_until(
                lambda: not any(_readable_from_zero(client, node) for node in local.nodes),
                30,
                "both replicas to drop their oldest segments",
            )
            assert client.describe_topic("grown").partitions[0].log_start > 0
            # a later change of the other setting leaves this one as it is
            again = client.alter_topic("grown", retention_ms=3_600_000)
            assert (again.retention_bytes, again.retention_ms) == (48 * 1024, 3_600_000)

            # partitions are added (placed, opened and elected as a new topic's), never removed
            wider = client.alter_topic("grown", partitions=3)
            assert [p.index for p in wider.partitions] == [0, 1, 2]
            assert all(len(p.replicas) == 2 for p in wider.partitions)
            settled = (3, 48 * 1024, 3_600_000)
            wait_until(  # every node's view: metadata reaches the other nodes within a poll
                lambda: all(_view(a, "grown") == settled for a in local.addresses()),
                30,
                "every node to see the changes",
            )
            with pytest.raises(
                InvalidArgument, match=r"partitions=2 is invalid.*can only be added"
            ):
                client.alter_topic("grown", partitions=2, retention_ms=1)
            assert all(_view(a, "grown") == settled for a in local.addresses())  # all or nothing
            assert client.produce("grown", b"new", partition=2).offset == 0
            assert [r.value for r in client.read("grown", 2, 0)] == [b"new"]
            keyed = {client.produce("grown", b"k", key=b"%d" % n).partition for n in range(30)}
            assert keyed == {0, 1, 2}  # the client routes over all three at once


def _readable_from_zero(client: Client, replica: str) -> bool:
    try:
        return bool(client.read("grown", 0, 0, 1, replica=replica))
    except OffsetOutOfRange:
        return False


def _view(address: str, topic: str) -> tuple[int, int, int]:
    """One node's own view of a topic: partitions, retention_bytes, retention_ms."""
    with grpc.insecure_channel(address) as channel:
        response = flotilla_pb2_grpc.FlotillaStub(channel).Metadata(
            pb.MetadataRequest(topics=[topic], topics_only=True), timeout=10
        )
    info = response.topics[0]
    return len(info.partitions), info.retention_bytes, info.retention_ms
