"""The SDK's poll(timeout) and subscribe(stop_after_idle_s=...) on a real (one-node) cluster,
sync and asyncio alike: a long poll answers as soon as a record commits and [] after its timeout;
a subscription ends once nothing came for its idle time. And the asyncio client's calls that
only the sync one had (metadata, fetch, the batching producer) work as the sync ones do."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from cluster.local import LocalCluster
from flotilla import Client, InvalidArgument
from flotilla import aio as flotilla_aio

pytestmark = pytest.mark.integration
CONFIG = "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalCluster(tmp_path_factory.mktemp("poll"), 1, config_text=CONFIG) as local:
        local.start()
        yield local.bootstrap


def test_sync_poll_waits_for_a_record_and_times_out_empty(bootstrap: str) -> None:
    with Client(bootstrap, timeout_s=30) as client:
        client.create_topic("polled", partitions=1, replication_factor=1)
        started = time.monotonic()
        assert client.poll("polled", 0, 0, timeout_s=0.8) == []
        assert 0.7 <= time.monotonic() - started < 5
        started = time.monotonic()
        assert client.poll("polled", 0, 0, timeout_s=0) == []  # at once
        assert time.monotonic() - started < 2

        writer = threading.Timer(0.5, lambda: client.produce("polled", b"late"))
        writer.start()
        try:
            started = time.monotonic()
            records = client.poll("polled", 0, 0, timeout_s=20)
            took = time.monotonic() - started
        finally:
            writer.join()
        assert [r.value for r in records] == [b"late"]
        assert took < 5, f"the poll answered {took:.1f} s after the record, not at once"
        client.produce_batch("polled", [b"a", b"b", b"c"], partition=0)
        position = records[-1].offset + 1
        assert [
            r.value for r in client.poll("polled", 0, position, timeout_s=5, max_records=2)
        ] == [b"a", b"b"]
        for bad in (-1, 61, "1", True):
            with pytest.raises(InvalidArgument, match="timeout_s="):
                client.poll("polled", 0, 0, timeout_s=bad)  # type: ignore[arg-type]


def test_sync_subscribe_stops_after_idle(bootstrap: str) -> None:
    with Client(bootstrap, timeout_s=30) as client:
        client.create_topic("idle", partitions=1, replication_factor=1)
        client.produce_batch("idle", [b"1", b"2", b"3"], partition=0)
        started = time.monotonic()
        values = [r.value for r in client.subscribe("idle", 0, 0, stop_after_idle_s=1.0)]
        took = time.monotonic() - started
        assert values == [b"1", b"2", b"3"]
        assert 0.9 <= took < 6, took
        for bad in (0, -2, "1"):
            with pytest.raises(InvalidArgument, match="stop_after_idle_s="):
                next(iter(client.subscribe("idle", 0, 0, stop_after_idle_s=bad)))  # type: ignore[arg-type]


def test_aio_poll_and_subscribe_stop_after_idle(bootstrap: str) -> None:
    async def scenario() -> None:
        async with flotilla_aio.Client(bootstrap, timeout_s=30) as client:
            await client.create_topic("aio-polled", partitions=1, replication_factor=1)
            started = time.monotonic()
            assert await client.poll("aio-polled", 0, 0, timeout_s=0.8) == []
            assert 0.7 <= time.monotonic() - started < 5

            async def late() -> None:
                await asyncio.sleep(0.5)
                await client.produce("aio-polled", b"late")

            writer = asyncio.create_task(late())
            records = await client.poll("aio-polled", 0, 0, timeout_s=20)
            await writer
            assert [r.value for r in records] == [b"late"]
            with pytest.raises(InvalidArgument, match="timeout_s="):
                await client.poll("aio-polled", 0, 0, timeout_s=-1)

            started = time.monotonic()
            values = [
                r.value async for r in client.subscribe("aio-polled", 0, 0, stop_after_idle_s=1.0)
            ]
            assert values == [b"late"]
            assert 0.9 <= time.monotonic() - started < 6

    asyncio.run(scenario())


def test_aio_metadata_fetch_and_batching_producer(bootstrap: str) -> None:
    values = [b"v%d" % n for n in range(50)]

    async def scenario() -> None:
        async with flotilla_aio.Client(bootstrap, timeout_s=30) as client:
            await client.create_topic("aio-batched", partitions=2, replication_factor=1)
            metadata = await client.metadata()
            assert "aio-batched" in [topic.name for topic in metadata.topics]
            assert [member.state for member in await client.members()] == ["ALIVE"]
            async with client.producer(linger_ms=5) as producer:
                futures = [await producer.send("aio-batched", v, key=b"k") for v in values]
                await producer.flush()
                assert all(future.done() for future in futures)
                written = [await future for future in futures]
            with pytest.raises(InvalidArgument, match="the producer is closed"):
                await producer.send("aio-batched", b"late")
            partition = written[0].partition
            assert [(m.partition, m.offset) for m in written] == [(partition, n) for n in range(50)]
            response = await client.fetch("aio-batched", partition, 0, 100, None)
            assert response.high_watermark == 50
            assert [r.value for r in await client.read("aio-batched", partition, 0, 100)] == values

    asyncio.run(scenario())
    with Client(bootstrap, timeout_s=30) as client:  # the sync client reads the same records
        partition = client.produce("aio-batched", b"sync", key=b"k").partition
        assert [r.value for r in client.read("aio-batched", partition, 0, 100)] == [
            *values,
            b"sync",
        ]
