"""The idempotent producer moves to a new producer id at once, in order and without writing a
batch twice, when the leader will never write its next batch under the current one: the
partition forgot the id (expired), or a batch acknowledged with acks=leader was lost with its
leader (issue 21, items 5 and 12). Real nodes; every wait has a deadline."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
EXPIRATION_MS = 1000


def _values(client: Client, topic: str, end: int) -> list[bytes]:
    values: list[bytes] = []
    while len(values) < end:
        records = client.read(topic, 0, len(values), max_records=10_000)
        if not records:
            break
        values += [record.value for record in records]
    return values


def test_an_expired_producer_moves_to_a_new_id_in_order(tmp_path: Path) -> None:
    """A producer idle past producer_expiration_ms is forgotten by the partition (across a
    restart, kill -9); its next batches (several in flight) are refused as UNKNOWN_PRODUCER_ID and the SDK resends them
    under a new id: all are written, once each, in the order they were sent."""
    config = CONFIG + f"producer_expiration_ms = {EXPIRATION_MS}\n"
    with LocalCluster(tmp_path, 1, controllers=1, config_text=config) as local:
        local.start()
        address = local.addresses()[0]
        with Client(address, timeout_s=15) as client:
            client.create_topic("ids", 1, 1)
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
            with client.producer(linger_ms=0, batch_bytes=1024) as producer:
                before = [producer.send("ids", b"before-%d" % n, partition=0) for n in range(20)]
                assert [f.result(timeout=15).offset for f in before] == list(range(20))
                idle_from_ms = time.time() * 1000
                wait_until(
                    lambda: time.time() * 1000 > idle_from_ms + EXPIRATION_MS + 200,
                    5,
                    "the producer's expiry",
                )
                # a restart: the leader's memory of its own proposals is gone, the table comes
                # back from the snapshot and the log; then another writer moves the partition's
                # clock (entries carry the leader's time) past the producer's expiry
                node = next(iter(local.nodes))
                local.kill(node)
                local.start(node)
                wait_until(
                    lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader"
                )
                with grpc.insecure_channel(address) as channel:
                    flotilla_pb2_grpc.FlotillaStub(channel).Produce(
                        pb.ProduceRequest(
                            topic="ids", partition=0, batch=encode_batch([(None, b"tick", None, 1)])
                        ),
                        timeout=15,
                    )
                started = time.monotonic()
                after = [
                    producer.send("ids", b"x" * 300 + b"%d" % n, partition=0) for n in range(200)
                ]
                offsets = [f.result(timeout=15).offset for f in after]
                elapsed = time.monotonic() - started
            values = _values(client, "ids", 221 + 5)
        print(f"200 records after the expiry written in {elapsed:.2f} s")
        assert offsets == list(range(21, 221))
        expected = [b"before-%d" % n for n in range(20)] + [b"tick"]
        expected += [b"x" * 300 + b"%d" % n for n in range(200)]
        assert values == expected  # in order, none twice
        assert elapsed < 10


def test_acks_leader_moves_on_at_once_after_an_acknowledged_batch_is_lost(tmp_path: Path) -> None:
    """acks=leader: the leader alone acknowledges a batch, then dies before any follower has
    it; the new leader has never seen it, so the producer's next batch leaves a gap it refuses
    as out of order. The producer must move to a new id at once, not stall until its timeout."""
    with LocalCluster(tmp_path, 3, controllers=3, config_text=CONFIG) as local:
        local.start()
        with Client(local.bootstrap, timeout_s=15, acks="leader") as client:
            client.create_topic("lost", 1, 3)
            wait_until(lambda: client.describe_topic("lost").partitions[0].leader, 30, "a leader")
            with client.producer(linger_ms=0) as producer:
                assert producer.send("lost", b"first", partition=0).result(timeout=15).offset == 0
                info = client.describe_topic("lost").partitions[0]
                leader = info.leader
                followers = [r for r in info.replicas if r != leader]

                def everyone_has_it() -> bool:
                    try:
                        return all(
                            len(client.read("lost", 0, 0, replica=r)) == 1 for r in followers
                        )
                    except Exception:
                        return False

                wait_until(everyone_has_it, 30, "the first record on every replica")
                for follower in followers:
                    local.kill(follower)
                lost = producer.send("lost", b"lost", partition=0).result(timeout=15)
                assert lost.offset == 1  # acknowledged by the leader alone
                local.kill(leader)
                for follower in followers:
                    local.start(follower, wait=False)
                for follower in followers:
                    local.wait_serving(follower)
                started = time.monotonic()
                after = producer.send("lost", b"after", partition=0).result(timeout=30)
                elapsed = time.monotonic() - started
            print(f"the batch after the lost one was written in {elapsed:.2f} s")
            values = [r.value for r in client.read("lost", 0, 0, replica=followers[0])]
        assert after.offset == 1 and values[:2] == [b"first", b"after"]
        assert elapsed < 8, f"stalled {elapsed:.1f} s behind the lost batch"
