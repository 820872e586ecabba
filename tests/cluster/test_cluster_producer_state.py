"""The idempotent producer across a restart (kill -9): a retry of a batch written long before —
thousands of entries of other producers since — is still answered with its first copy, because
the replica saves its producer table (`cluster.replica.producer_snapshot`) and a restart loads it
and scans only the entries after it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from harness import wait_until

from cluster.local import LocalCluster
from cluster.replica import PRODUCER_SNAPSHOT, REBUILD_SCAN_ENTRIES
from flotilla import Client
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import encode_batch

pytestmark = pytest.mark.integration

CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\nswim_tick_ms = 100\n"
PRODUCER = 0x5EED


def _produce(address: str, batch: bytes) -> pb.ProduceResponse:
    with grpc.insecure_channel(address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        response: pb.ProduceResponse = stub.Produce(
            pb.ProduceRequest(topic="ids", partition=0, batch=batch), timeout=30
        )
        return response


def test_a_retry_after_a_restart_finds_a_batch_written_long_before(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, controllers=1, config_text=CONFIG) as local:
        local.start()
        address = local.addresses()[0]
        with Client(address, timeout_s=30) as client:
            client.create_topic("ids", 1, 1)
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
            batch = encode_batch([(None, b"once", None, 1)], producer_id=PRODUCER)
            first = _produce(address, batch)
            assert (first.base_offset, first.duplicate) == (0, False)
        # more batches of others than a restart scans without the saved table: one entry each,
        # written by raw calls many in flight (the leader packs them into few rounds)
        others = REBUILD_SCAN_ENTRIES + 600
        other = encode_batch([(None, b"x" * 900, None, int(time.time() * 1000))])
        written = asyncio.run(_produce_many(address, [other] * others))
        assert sorted(r.base_offset for r in written) == list(range(1, others + 1))
        directory = tmp_path / "n1" / "partitions" / "ids" / "0"
        assert (directory / PRODUCER_SNAPSHOT).exists()

        node = next(iter(local.nodes))
        local.kill(node)
        local.start(node)
        with Client(address, timeout_s=30) as client:
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
        again = _produce(address, batch)  # the producer's retry, after the restart
        assert (again.base_offset, again.duplicate) == (0, True)


# -- the long-lived producers test (issue 21, item 5) ------------------------------------------
LONG_LIVED_PRODUCERS = 3 * REBUILD_SCAN_ENTRIES + 14_000  # > 10,000 ids, and far past the scan
EARLY = 64  # the producers whose batches are retried late, after the restart
IN_FLIGHT = 48  # concurrent raw produce calls (the leader packs them into few rounds); under the
# produce gate's budget (256 MiB, each call counted as a 4 MiB request until it has arrived: 63),
# so no call is refused as OVERLOADED, which this raw client would not retry


async def _produce_many(address: str, batches: list[bytes]) -> list[pb.ProduceResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = flotilla_pb2_grpc.FlotillaStub(channel)
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(batch: bytes) -> pb.ProduceResponse:
            async with gate:
                request = pb.ProduceRequest(topic="ids", partition=0, batch=batch)
                response: pb.ProduceResponse = await stub.Produce(request, timeout=60)
                return response

        return await asyncio.gather(*(one(batch) for batch in batches))


def test_long_lived_producers_a_late_retry_after_a_restart_is_a_duplicate(tmp_path: Path) -> None:
    """More than 10,000 producer ids write to one partition (one batch each); the node is killed
    (-9) and restarted; then the first producers' batches are retried, as a producer retries a
    batch whose answer it lost. Each retry must be answered as a duplicate with the first copy's
    offset, and the log read back must hold each of those records once."""
    with LocalCluster(tmp_path, 1, controllers=1, config_text=CONFIG) as local:
        local.start()
        address = local.addresses()[0]
        with Client(address, timeout_s=30) as client:
            client.create_topic("ids", 1, 1)
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
        batches = [
            encode_batch([(None, b"p%d" % n, None, 1)], producer_id=1000 + n)
            for n in range(LONG_LIVED_PRODUCERS)
        ]
        started = time.monotonic()
        first = asyncio.run(_produce_many(address, batches))
        offsets = [response.base_offset for response in first]
        assert sorted(offsets) == list(range(LONG_LIVED_PRODUCERS))
        print(f"{LONG_LIVED_PRODUCERS} producers wrote in {time.monotonic() - started:.1f} s")

        node = next(iter(local.nodes))
        local.kill(node)
        local.start(node)
        with Client(address, timeout_s=30) as client:
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
            again = asyncio.run(_produce_many(address, batches[:EARLY]))
            answers = [(r.base_offset, r.duplicate) for r in again]
            assert answers == [(offset, True) for offset in offsets[:EARLY]]
            values: list[bytes] = []
            offset = 0
            while offset < LONG_LIVED_PRODUCERS + EARLY:  # past the end, were it written twice
                records = client.read("ids", 0, offset, max_records=10_000)
                if not records:
                    break
                values += [record.value for record in records]
                offset = records[-1].offset + 1
        assert len(values) == LONG_LIVED_PRODUCERS  # nothing written twice
        assert values.count(b"p0") == 1


def test_a_copy_older_than_the_remembered_batches_is_never_written_again(tmp_path: Path) -> None:
    """A node's copier (a due timer fired again after a failover, a dead letter copied again)
    resends a batch of its deterministic producer. Older than the batches the partition
    remembers per producer (`cluster.producers.WINDOW`), it is refused ABORTED as behind
    (`SEQUENCE_BEHIND`): the copier must take it as written, not rebase it under a new producer
    id (which wrote it twice: found as timers fired twice after a restart of every node)."""
    from cluster.copy_produce import CopyProducer
    from cluster.producers import WINDOW

    with LocalCluster(tmp_path, 1, controllers=1, config_text=CONFIG) as local:
        local.start()
        address = local.addresses()[0]
        with Client(address, timeout_s=30) as client:
            client.create_topic("ids", 1, 1)
            wait_until(lambda: client.describe_topic("ids").partitions[0].leader, 30, "a leader")
        batches = [
            encode_batch([(None, b"%d" % i, None, 1)], producer_id=PRODUCER, base_sequence=i)
            for i in range(WINDOW + 4)
        ]
        for batch in batches:
            _produce(address, batch)

        async def copy_again() -> pb.ProduceResponse:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = flotilla_pb2_grpc.FlotillaStub(channel)

                async def leader(topic: str, partition: int, fresh: bool) -> str:
                    return "n1"

                copies = CopyProducer(leader, lambda node: stub)
                return await copies.copy("ids", 0, batches[0])

        answer = asyncio.run(copy_again())
        assert answer.duplicate
        with Client(address, timeout_s=30) as client:
            values = [r.value for r in client.read("ids", 0, 0, max_records=100)]
        assert values == [b"%d" % i for i in range(WINDOW + 4)], "a copy was written twice"
