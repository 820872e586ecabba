"""The SDK's poll(timeout) and subscribe(stop_after_idle_s=...) on a real (one-node) cluster,
sync and asyncio alike: a long poll answers as soon as a record commits and [] after its timeout;
a subscription ends once nothing came for its idle time."""

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
