"""The SDK at a node's edge: an overloaded node (its produce gate full) is retried with backoff,
never taken for bad input; a record or batch that cannot fit `max_batch_bytes` is refused in the
SDK, before sending, naming its size and the limit."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest

import flotilla.aio
import flotilla.client
from cluster.local import LocalCluster
from flotilla import Client, FlotillaError, InvalidArgument, Overloaded
from flotilla import aio as flotilla_aio
from flotilla.errors import from_rpc_error

pytestmark = pytest.mark.integration
# a gate that admits two produce calls at once: a few concurrent producers overload it
CONFIG = (
    "tick_ms = 50\nelection_ticks = 10\nheartbeat_ticks = 2\n"
    "max_inflight_produce = 2\nmax_batch_bytes = 65536\n"
)
MAX_BATCH_BYTES = 65536


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("overload"), 1, config_text=CONFIG) as local:
        local.start()
        yield local


def _all_values(client: Client, topic: str, partitions: int) -> Counter[bytes]:
    seen: Counter[bytes] = Counter()
    for partition in range(partitions):
        offset = 0
        while True:
            records = client.read(topic, partition, offset, max_records=1000)
            if not records:
                break
            seen.update(record.value for record in records)
            offset = records[-1].offset + 1
            if len(records) < 1000:
                break
    return seen


def test_an_overloaded_node_is_retried_until_every_record_is_written_once(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve sync threads, twelve asyncio tasks and a batching producer flood a node whose gate
    admits two produce calls at once: many calls are refused as overload, and every record is
    still written exactly once, with no InvalidArgument (nor any other failure) reaching a
    caller."""
    topic, partitions, per_sender = "flood", 3, 12
    refusals: Counter[str] = Counter()

    def counted(error: grpc.RpcError) -> FlotillaError:  # the real mapping, its answers counted
        mapped = from_rpc_error(error)
        refusals[type(mapped).__name__] += 1
        return mapped

    monkeypatch.setattr(flotilla.client, "from_rpc_error", counted)
    monkeypatch.setattr(flotilla.aio, "from_rpc_error", counted)
    failures: list[str] = []
    expected: list[bytes] = []
    with Client(cluster.addresses(), timeout_s=60) as client:
        client.create_topic(topic, partitions=partitions, replication_factor=1)
        client.produce(topic, b"warm-up", partition=0)
        expected.append(b"warm-up")

        def sync_sender(slot: int) -> None:
            try:
                with Client(cluster.addresses(), timeout_s=60) as mine:
                    for n in range(per_sender):
                        mine.produce(topic, f"s{slot}-{n}".encode(), partition=n % partitions)
            except FlotillaError as error:
                failures.append(f"sync {slot}: {type(error).__name__}: {error}")

        async def async_senders() -> None:
            async with flotilla_aio.Client(cluster.addresses(), timeout_s=60) as mine:

                async def one(slot: int) -> None:
                    try:
                        for n in range(per_sender):
                            await mine.produce(topic, f"a{slot}-{n}".encode(), partition=n % 3)
                    except FlotillaError as error:
                        failures.append(f"async {slot}: {type(error).__name__}: {error}")

                await asyncio.gather(*(one(slot) for slot in range(12)))

        threads = [threading.Thread(target=sync_sender, args=(s,), daemon=True) for s in range(12)]
        threads.append(threading.Thread(target=lambda: asyncio.run(async_senders()), daemon=True))
        for thread in threads:
            thread.start()
        producer_values = [f"p-{n}".encode() for n in range(300)]
        with client.producer(linger_ms=1, batch_bytes=2048, max_in_flight=8) as producer:
            futures = [producer.send(topic, value) for value in producer_values]
            for future in futures:
                try:
                    future.result(timeout=90)
                except FlotillaError as error:
                    failures.append(f"producer: {type(error).__name__}: {error}")
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a sender still running"
        expected += [f"s{s}-{n}".encode() for s in range(12) for n in range(per_sender)]
        expected += [f"a{s}-{n}".encode() for s in range(12) for n in range(per_sender)]
        expected += producer_values
        assert not failures, (len(failures), failures[:3])
        assert refusals[Overloaded.__name__] > 0, f"the gate was never full: {refusals}"
        print(f"errors seen and retried by the SDK: {dict(refusals)}")
        seen = _all_values(client, topic, partitions)
        assert seen == Counter(expected), (
            f"missing: {sorted(set(expected) - set(seen))[:5]}, "
            f"repeated: {[v for v, c in seen.items() if c > 1][:5]}"
        )


def test_a_record_or_batch_over_max_batch_bytes_is_refused_before_sending(
    cluster: LocalCluster,
) -> None:
    """The node accepts batches up to 64 KiB (it says so in metadata). A record or batch that
    cannot fit is refused by the SDK itself, naming its size and the limit (sent, one more than
    64 KiB past the node's request limit would be refused by gRPC, which names neither), by both
    clients and the batching producer; nothing of it is written, and what follows is."""
    topic = "too-big"
    big = b"x" * (5 << 20)
    over = r"batch of 52429\d\d bytes .*max_batch_bytes=65536"
    with Client(cluster.addresses(), timeout_s=30) as client:
        client.create_topic(topic, partitions=1, replication_factor=1)
        with pytest.raises(InvalidArgument, match=over):
            client.produce(topic, big)
        with pytest.raises(InvalidArgument, match=r"batch of 7\d{4} bytes .*max_batch_bytes=65536"):
            client.produce(topic, b"y" * 70_000, partition=0)
        with pytest.raises(
            InvalidArgument, match=r"\(100 records, encoded\).*max_batch_bytes=65536"
        ):
            client.produce_batch(topic, [b"z" * 1000] * 100, partition=0)

        async def asynchronous() -> None:
            async with flotilla_aio.Client(cluster.addresses(), timeout_s=30) as mine:
                with pytest.raises(InvalidArgument, match=over):
                    await mine.produce(topic, big)
                with pytest.raises(
                    InvalidArgument, match=r"\(100 records, encoded\).*max_batch_bytes"
                ):
                    await mine.produce_batch(topic, [b"z" * 1000] * 100)

        asyncio.run(asynchronous())
        with client.producer(linger_ms=1) as producer:
            with pytest.raises(InvalidArgument, match=r"record of 52429\d\d bytes.*=65536"):
                producer.send(topic, big)
            assert producer.send(topic, b"after").result(timeout=30).offset == 0
        assert client.produce(topic, b"then").offset == 1
        assert [r.value for r in client.read(topic, 0, 0)] == [b"after", b"then"]
