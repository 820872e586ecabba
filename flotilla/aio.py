"""The asyncio client: the same calls as `flotilla.Client`, as coroutines.

    from flotilla.aio import Client
    async with Client("127.0.0.1:7001") as c:
        meta = await c.produce("orders", b"hello")
        async for record in c.subscribe("orders", partition=meta.partition):
            ...

It shares routing, partitioning and the idempotent producer's sequence numbers with the
synchronous client (`flotilla._routing`); only the transport differs (grpc.aio).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from flotilla._routing import (
    METADATA_GRACE_S,
    RETRIABLE,
    RYW_WAIT_S,
    SUBSCRIBE_IDLE_TIMEOUT_S,
    Headers,
    Member,
    ProducerGap,
    ProduceRoute,
    ReadYourWrites,
    Record,
    RecordMetadata,
    Router,
    TopicInfo,
    alter_request,
    check_idle_timeout,
    check_read,
    check_record,
    check_value,
    create_request,
    decode_fetch,
    member,
    now_ms,
    subscribe_address,
    topic_info,
    worth_retrying,
)
from flotilla.client import (
    _OPTIONS,
    POLL_STEP_S,
    check_poll_timeout,
    check_stop_after_idle,
    keepalive_ms,
)
from flotilla.errors import (
    FlotillaError,
    InvalidArgument,
    Timeout,
    TopicNotFound,
    Unavailable,
    from_rpc_error,
)
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc
from proto.records import peek_producer, with_producer

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """The asyncio twin of `flotilla.Client`: the same calls, arguments and errors, as
    coroutines (`subscribe` is an async iterator). Use it from one event loop; close it (or
    use `async with`) when done."""

    def __init__(
        self, bootstrap: str | Sequence[str], *, timeout_s: float = 15.0, acks: str = "all"
    ) -> None:
        if acks not in ("all", "leader"):
            raise InvalidArgument(f"acks={acks!r}: use 'all' (durable on a quorum) or 'leader'")
        self.router = Router([bootstrap] if isinstance(bootstrap, str) else list(bootstrap))
        self.timeout_s = timeout_s
        self.acks = pb.ACKS_ALL if acks == "all" else pb.ACKS_LEADER
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, flotilla_pb2_grpc.FlotillaStub] = {}  # one per channel: cheap calls

    def _stub(self, address: str) -> flotilla_pb2_grpc.FlotillaStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=_OPTIONS)
            stub = self._stubs[address] = flotilla_pb2_grpc.FlotillaStub(channel)
        return stub

    async def _any_node(self, call: Callable[[flotilla_pb2_grpc.FlotillaStub], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.timeout_s
        last: FlotillaError | None = None
        nobody = self.router.watch_unreachable()
        while time.monotonic() < deadline:
            addresses = self.router.candidates()
            for address in addresses:
                try:
                    return await call(self._stub(address))
                except grpc.aio.AioRpcError as error:
                    last = from_rpc_error(error)
                    if not isinstance(last, Unavailable | Timeout):
                        raise last from None
                    nobody.failed(address, error)
            given_up = nobody.round_done(addresses, time.monotonic())
            if given_up is not None:
                raise given_up
            await asyncio.sleep(0.1)
        raise last or Unavailable("no node answered")

    async def refresh(self, topics: Sequence[str] = ()) -> None:
        """Reloads cluster metadata (members, topics, leaders)."""
        response = await self._any_node(
            lambda stub: stub.Metadata(pb.MetadataRequest(topics=topics), timeout=5)
        )
        self.router.absorb(response)

    async def _not_found_grace(self, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + METADATA_GRACE_S
        while True:
            try:
                return await call()
            except TopicNotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _topic(self, name: str) -> TopicInfo:
        if self.router.topic(name) is None:
            await self._not_found_grace(lambda: self.refresh([name]))
        info = self.router.topic(name)
        if info is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return info

    # -- topics ----------------------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 0,
        *,
        retention_bytes: int = 0,
        retention_ms: int = 0,
    ) -> TopicInfo:
        """Creates a topic; idempotent when a topic of the same spec exists. A
        `replication_factor` of 0 takes the cluster's default (3, or the live members if fewer;
        `TopicInfo.note` then says so)."""
        request = create_request(
            name, partitions, replication_factor, retention_bytes, retention_ms
        )
        info = topic_info(await self._any_node(lambda stub: stub.CreateTopic(request, timeout=20)))
        await self._not_found_grace(lambda: self.refresh([name]))
        return info

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
    ) -> TopicInfo:
        """Changes a topic, as `flotilla.Client.alter_topic`; None leaves a setting as it is."""
        request = alter_request(name, partitions, retention_bytes, retention_ms)
        response = await self._any_node(lambda stub: stub.AlterTopic(request, timeout=20))
        self.router.absorb(pb.MetadataResponse(topics=[response]))  # its partitions from now
        return topic_info(response)

    async def delete_topic(self, name: str) -> None:
        """Deletes a topic and its records on every replica; TopicNotFound if there is none."""
        await self._any_node(
            lambda stub: stub.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=20)
        )
        self.router.forget_topic(name)

    async def list_topics(self) -> list[str]:
        """The names of every topic."""
        response = await self._any_node(
            lambda stub: stub.ListTopics(pb.ListTopicsRequest(), timeout=5)
        )
        return list(response.names)

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic's settings and its partitions' leaders, replicas and offsets."""
        response = await self._not_found_grace(
            lambda: self._any_node(
                lambda stub: stub.Metadata(pb.MetadataRequest(topics=[name]), timeout=5)
            )
        )
        self.router.absorb(response)
        return topic_info(response.topics[0])

    async def members(self) -> list[Member]:
        """The cluster's members as the node asked sees them (alive, suspect, dead, left)."""
        response = await self._any_node(lambda stub: stub.Metadata(pb.MetadataRequest(), timeout=5))
        self.router.absorb(response)
        return [member(m) for m in response.members]

    # -- produce ---------------------------------------------------------------------------------
    async def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> RecordMetadata:
        """Writes one record and waits until it is acknowledged (committed on a quorum with
        acks="all"; appended by the leader with acks="leader")."""
        value, key, headers = check_record(value, key, headers)
        await self._topic(topic)
        chosen = self.router.partition_for(topic, key, partition)
        batch = self.router.encode(topic, chosen, [(key, value, headers, now_ms())])
        return RecordMetadata(topic, chosen, await self.send_batch(topic, chosen, batch))

    async def produce_batch(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[RecordMetadata]:
        """Writes unkeyed records as one batch to one partition (round-robin across calls)."""
        if not values:
            return []
        await self._topic(topic)
        chosen = self.router.partition_for(topic, None, partition)
        timestamp = now_ms()
        batch = self.router.encode(
            topic, chosen, [(None, check_value(v), None, timestamp) for v in values]
        )
        base = await self.send_batch(topic, chosen, batch)
        return [RecordMetadata(topic, chosen, base + n) for n in range(len(values))]

    async def send_batch(self, topic: str, partition: int, batch: bytes) -> int:
        """Sends an encoded batch to the partition's leader until it commits; its base offset.
        A batch that fails for good moves the partition to a new producer id (see
        `flotilla._routing.Sequences.reset`)."""
        sequences = self.router.sequences
        route = ProduceRoute(self.router, topic, partition, self.timeout_s)
        route.batch = peek_producer(batch)
        try:
            while True:
                try:
                    base = await self._send_batch(route, batch)
                    break
                except ProducerGap as gap:  # resend under a new id (see `Sequences.move`)
                    moved = sequences.move(topic, partition, *route.batch)
                    if moved is None:
                        raise Unavailable(
                            f"{gap.cause} (an earlier batch of this producer failed for good; "
                            "this one was not written: send it again)"
                        ) from None
                    batch, route.batch = with_producer(batch, *moved), moved
        except FlotillaError:
            sequences.reset(topic, partition, route.batch[0])
            raise
        finally:
            sequences.settled(topic, partition, *route.batch)
        self.router.note_written(topic, partition, base, batch)
        return base

    async def _send_batch(self, route: ProduceRoute, batch: bytes) -> int:
        topic, partition = route.topic, route.partition
        while True:
            attempt_s = route.attempt_s()
            address = route.next_address()
            if address is None:
                await self._refresh_quietly(topic)
                address = route.next_address()
            if address is not None:
                request = pb.ProduceRequest(
                    topic=topic, partition=partition, batch=batch, acks=self.acks,
                    timeout_ms=max(1, int(attempt_s * 1000)),
                )  # fmt: skip
                try:
                    response = await self._stub(address).Produce(request, timeout=attempt_s)
                    return int(response.base_offset)
                except grpc.aio.AioRpcError as error:
                    if route.failed(address, from_rpc_error(error)):
                        continue
            await asyncio.sleep(route.pause_s())
            if route.refresh_due():  # the cached routes failed twice: ask the cluster afresh
                await self._refresh_quietly(topic)

    async def _refresh_quietly(self, topic: str) -> None:
        try:
            await self.refresh([topic])
        except (Unavailable, Timeout, TopicNotFound):
            pass  # a node whose metadata lags; the cached routes still stand

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
        """One raw Fetch (the batches as stored) with read-your-writes and replica failover;
        `read` and `poll` decode it. `max_wait_ms`: a long poll's wait at the tail."""
        check_read(offset, max_records)
        await self._topic(topic)
        self.router.partition_for(topic, None, partition)
        request = pb.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
            min_high_watermark=self.router.written_to(topic, partition),
        )
        last: FlotillaError | None = None
        deadline = time.monotonic() + self.timeout_s
        grace_until = time.monotonic() + METADATA_GRACE_S
        while time.monotonic() < deadline:
            behind = ReadYourWrites(
                request.min_high_watermark, pinned=replica is not None, offset=offset
            )
            for address in self.router.read_addresses(topic, partition, replica):
                try:  # OffsetNotAvailable (a replica that lags) is worth retrying elsewhere
                    response = await self._stub(address).Fetch(
                        request, timeout=5 + max_wait_ms / 1000 + RYW_WAIT_S
                    )
                except grpc.aio.AioRpcError as error:
                    last = from_rpc_error(error)
                    if not worth_retrying(last, grace_until):
                        raise last from None
                    continue
                if behind.accept(response):
                    return response
            if behind.best is not None:
                return behind.best
            await asyncio.sleep(0.05)
            await self._refresh_quietly(topic)
        raise last or Unavailable(f"no replica of {topic}/{partition} answered")

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
        response = await self.fetch(topic, partition, offset, max_records, replica)
        return decode_fetch(response, offset, max_records)

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
        wait_s = check_poll_timeout(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            step_s = min(POLL_STEP_S, max(0.0, deadline - time.monotonic()))
            response = await self.fetch(
                topic, partition, offset, max_records, replica, max_wait_ms=int(step_s * 1000)
            )
            records = decode_fetch(response, offset, max_records)
            if records or time.monotonic() >= deadline:
                return records

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
        check_read(offset)
        idle_s = check_idle_timeout(idle_timeout_s)
        stop_s = check_stop_after_idle(stop_after_idle_s)
        await self._topic(topic)
        avoid: set[str] = set()
        quiet_since = time.monotonic()
        while True:
            address = subscribe_address(
                self.router.read_addresses(topic, partition, replica), avoid
            )
            call = self._stub(address).Subscribe(
                pb.FetchRequest(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    max_wait_ms=keepalive_ms(stop_s),
                )
            )
            try:
                while True:
                    try:  # only the wait for the stream counts, not the caller's time
                        response = await asyncio.wait_for(call.read(), idle_s)
                    except TimeoutError:
                        break  # stalled (paused, wedged): resume on another replica
                    if response is grpc.aio.EOF:
                        break
                    for record in decode_fetch(response, offset, 1 << 62):
                        offset = record.offset + 1
                        yield record
                    if response.batches:
                        avoid.clear()
                        quiet_since = time.monotonic()
                    elif stop_s is not None and time.monotonic() - quiet_since >= stop_s:
                        return
            except grpc.aio.AioRpcError as error:
                failure = from_rpc_error(error)
                if not isinstance(failure, RETRIABLE):
                    raise failure from None
                await asyncio.sleep(0.1)
            finally:
                call.cancel()
            if stop_s is not None and time.monotonic() - quiet_since >= stop_s:
                return
            avoid.add(address)

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
