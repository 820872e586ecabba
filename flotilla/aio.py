"""The asyncio client: the same calls as `flotilla.Client`, as coroutines.

    from flotilla.aio import Client
    async with Client("127.0.0.1:7001") as c:
        meta = await c.produce("orders", b"hello")
        async for record in c.subscribe("orders", partition=meta.partition):
            ...

Each call is a plan of the client core (`flotilla._core`), the one the synchronous client runs:
routing, retries, metadata and the idempotent producer's sequence numbers are the same code;
only the transport differs (grpc.aio). tests/flotilla/test_client_surface.py holds the two
clients' calls to the same names, parameters and defaults.

Two calls are not coroutines: `producer(...)` returns an `AsyncProducer`, the asyncio face of the
thread-based batching producer (see its text), and `consumer(...)` an `AsyncConsumer`
(`flotilla.consumer`), whose calls are.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import grpc

from flotilla._checks import SUBSCRIBE_IDLE_TIMEOUT_S
from flotilla._client_setup import ClientSetup
from flotilla._core import CHANNEL_OPTIONS, Failed, Plan, Rpc
from flotilla._group_client import AsyncGroupAdmin
from flotilla._plans import unreachable_reason
from flotilla._security_client import AsyncSecurityAdmin
from flotilla.client import Client as SyncClient
from flotilla.errors import from_rpc_error
from flotilla.producer import Producer
from flotilla.types import Headers, Member, Record, RecordMetadata, TopicInfo
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = ["AsyncProducer", "Client"]

T = TypeVar("T")


class Client(ClientSetup[grpc.aio.Channel], AsyncGroupAdmin, AsyncSecurityAdmin):
    """The asyncio twin of `flotilla.Client`: the same calls, arguments and errors, as
    coroutines (`subscribe` is an async iterator, `producer` returns an `AsyncProducer`,
    `consumer` an `AsyncConsumer`). Use it from one event loop; close it (or use `async with`)
    when done. TLS and token settings as `flotilla.Client`'s (the same environment
    variables)."""

    # -- the driver ------------------------------------------------------------------------------
    def _stub(self, address: str) -> flotilla_pb2_grpc.FlotillaStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._core.credentials.aio_channel(address, CHANNEL_OPTIONS)
            self._channels[address] = channel
            stub = self._stubs[address] = flotilla_pb2_grpc.FlotillaStub(channel)
        return stub

    async def _run(self, plan: Plan[T]) -> T:
        """Runs a plan of the core on the event loop: its calls and sleeps awaited; its value."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Rpc):
                    outcome = await self._call(step)
                else:
                    await asyncio.sleep(step.seconds)
                    outcome = None
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value

    async def _call(self, rpc: Rpc) -> Any:
        try:
            method = getattr(self._stub(rpc.address), rpc.method)
            call = method(
                rpc.request, timeout=rpc.timeout_s, metadata=self._core.credentials.metadata
            )
            if rpc.on_issued is not None:
                rpc.on_issued()  # the call is on its way once made (grpc.aio starts it)
            return await call
        except grpc.aio.AioRpcError as error:
            return Failed(from_rpc_error(error), unreachable_reason(error))

    # -- topics ----------------------------------------------------------------------------------
    async def refresh(self, topics: Sequence[str] = ()) -> None:
        """Reloads cluster metadata (members, topics, leaders)."""
        await self._run(self._core.refresh(topics))

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 0,
        *,
        retention_bytes: int = 0,
        retention_ms: int = 0,
        max_delay_ms: int | None = None,
    ) -> TopicInfo:
        """Creates a topic, as `flotilla.Client.create_topic`; idempotent when a topic of the
        same spec exists; `replication_factor` 0 takes the cluster's default."""
        return await self._run(
            self._core.create_topic(
                name, partitions, replication_factor, retention_bytes, retention_ms, max_delay_ms
            )
        )

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        max_delay_ms: int | None = None,
    ) -> TopicInfo:
        """Changes a topic, as `flotilla.Client.alter_topic`; None leaves a setting as it is."""
        return await self._run(
            self._core.alter_topic(name, partitions, retention_bytes, retention_ms, max_delay_ms)
        )

    async def delete_topic(self, name: str) -> None:
        """Deletes a topic and its records, as `flotilla.Client.delete_topic`."""
        await self._run(self._core.delete_topic(name))

    async def list_topics(self) -> list[str]:
        """The names of every topic, as `flotilla.Client.list_topics`."""
        return await self._run(self._core.list_topics())

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic's settings, partitions, leaders and offsets (`Client.describe_topic`)."""
        return await self._run(self._core.describe_topic(name))

    async def members(self) -> list[Member]:
        """The cluster's members as the node asked sees them (`Client.members`)."""
        return await self._run(self._core.members())

    async def metadata(self) -> pb.MetadataResponse:
        """The raw metadata from any node, as `flotilla.Client.metadata`."""
        return await self._run(self._core.metadata())

    # -- produce ---------------------------------------------------------------------------------
    async def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> RecordMetadata[Any]:
        """Writes one record and waits until it is acknowledged, as `flotilla.Client.produce`."""
        return await self._run(
            self._core.produce(topic, value, key, partition, headers, delay_ms, deliver_at_ms)
        )

    async def produce_batch(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[RecordMetadata[int]]:
        """Writes unkeyed records as one batch to one partition (round-robin across calls)."""
        return await self._run(self._core.produce_batch(topic, values, partition))

    async def send_batch(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        on_issued: Callable[[], None] | None = None,
        abandoned: Callable[[], bool] | None = None,
        on_moved: Callable[[int, int], None] | None = None,
        deliver_at_ms: int = 0,
    ) -> int:
        """Sends an encoded batch to the partition's leader until it commits; its base offset.
        As `flotilla.Client.send_batch` (the same bytes on every retry; the callbacks alike)."""
        return await self._run(
            self._core.send_batch(
                topic, partition, batch, on_issued, abandoned, on_moved, deliver_at_ms
            )
        )

    def producer(
        self,
        linger_ms: float = 5,
        batch_bytes: int = 1 << 20,
        max_in_flight: int = 16,
        buffer_bytes: int = 64 << 20,
        max_in_flight_per_partition: int = 4,
    ) -> AsyncProducer:
        """A batching producer for asyncio code (`AsyncProducer`): `await send(...)` returns
        an asyncio Future; `flush`, `close`. The same settings as `flotilla.Client.producer`."""
        sender = SyncClient._over(self._core)
        producer = Producer(
            sender,
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            max_in_flight=max_in_flight,
            buffer_bytes=buffer_bytes,
            max_in_flight_per_partition=max_in_flight_per_partition,
        )
        return AsyncProducer(producer, sender)

    # -- read --------------------------------------------------------------------------------------
    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        replica: str | None,
        max_wait_ms: int = 0,
    ) -> pb.FetchResponse:
        """One raw Fetch with read-your-writes and replica failover (`Client.fetch`)."""
        return await self._run(
            self._core.fetch(topic, partition, offset, max_records, replica, max_wait_ms)
        )

    async def read(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        max_records: int = 1000,
        replica: str | None = None,
    ) -> list[Record]:
        """Committed records from `offset` on (at most `max_records`), from any replica unless
        `replica` pins one; as `flotilla.Client.read`."""
        return await self._run(self._core.read(topic, partition, offset, max_records, replica))

    async def poll(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        timeout_s: float = 1.0,
        *,
        max_records: int = 1000,
        replica: str | None = None,
    ) -> list[Record]:
        """Committed records from `offset` on, waiting up to about `timeout_s` for the first
        one; [] when none came in time. As `flotilla.Client.poll`."""
        return await self._run(
            self._core.poll(topic, partition, offset, timeout_s, max_records, replica)
        )

    async def subscribe(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        replica: str | None = None,
        *,
        idle_timeout_s: float = SUBSCRIBE_IDLE_TIMEOUT_S,
        stop_after_idle_s: float | None = None,
    ) -> AsyncIterator[Record]:
        """As `flotilla.Client.subscribe`: a replica silent for `idle_timeout_s` (no records,
        no keepalive) or lagging is left for another, from the next offset; the iteration
        ends once no record came for `stop_after_idle_s` (None: it follows for ever)."""
        subscription = self._core.subscription(
            topic, partition, offset, replica, idle_timeout_s, stop_after_idle_s
        )
        await self._run(self._core.topic(topic))
        while True:
            address, request = subscription.connect()
            call = self._stub(address).Subscribe(request, metadata=self._core.credentials.metadata)
            try:
                while True:
                    try:  # only the wait for the stream counts, not the caller's time
                        response = await asyncio.wait_for(call.read(), subscription.idle_s)
                    except TimeoutError:
                        break  # stalled (paused, wedged): resume on another replica
                    if response is grpc.aio.EOF:
                        break
                    for record in subscription.records(response):
                        yield record
                    if subscription.delivered(response):
                        return
            except grpc.aio.AioRpcError as error:
                if subscription.failed(from_rpc_error(error)):
                    await self._run(self._core.refresh_quietly(topic))
                await asyncio.sleep(0.1)
            finally:
                call.cancel()
            if subscription.left(address):
                return

    # -- lifecycle ---------------------------------------------------------------------------------
    async def close(self) -> None:
        """Closes the client's connections."""
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()

    async def __aenter__(self) -> Client:
        """`async with Client(...) as client:` closes the client on the way out."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Closes the client."""
        await self.close()


class AsyncProducer:
    """The batching producer for asyncio code, which `flotilla.aio.Client.producer(...)`
    returns: `send` queues a record and returns an asyncio Future of its `RecordMetadata`,
    `flush` waits until every one is settled, `close` flushes and stops it.

    It is `flotilla.producer.Producer` (the same batching, ordering, memory bound and
    exactly-once sequences), which is thread-based: its batches are encoded and sent by its
    own threads, through a sync client over this client's core (the same producer ids,
    sequences and read-your-writes). Its calls that may block (`send` while the buffer is full
    or a topic's metadata is fetched, `flush`, `close`) run in a worker thread, so the event
    loop never waits on them: each `send` costs a hop to a thread."""

    def __init__(self, producer: Producer, sender: SyncClient) -> None:
        self._producer = producer
        self._sender = sender

    async def send(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata[Any]]:
        """Queues one record; the Future resolves to its `RecordMetadata` once committed (a
        delayed record's once accepted: see `flotilla.producer.Producer.send`)."""
        future = await asyncio.to_thread(
            self._producer.send, topic, value, key, partition, headers, delay_ms, deliver_at_ms
        )
        return asyncio.wrap_future(future)

    async def flush(self, timeout_s: float | None = None) -> None:
        """Sends everything pending now and waits until every future is settled."""
        await asyncio.to_thread(self._producer.flush, timeout_s)

    async def close(self) -> None:
        """Flushes, then stops the producer's threads; `send` raises afterwards."""
        await asyncio.to_thread(self._producer.close)
        self._sender.close()

    async def __aenter__(self) -> AsyncProducer:
        """`async with client.producer() as producer:` closes (and so flushes) it on the way
        out."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Closes the producer (every record sent is settled first)."""
        await self.close()
