"""The synchronous client (thread-safe).

    from flotilla import Client
    with Client("127.0.0.1:7001") as c:
        c.create_topic("orders", partitions=3, replication_factor=3)
        meta = c.produce("orders", b"hello", key=b"customer-7")
        records = c.read("orders", partition=meta.partition, offset=meta.offset)

Routing: metadata from any node, a leader cache, `NOT_LEADER` hints followed, retries with
backoff until `timeout_s`. Every batch carries this client's producer id and a per-partition
sequence number, and a retry resends the very same bytes, so the server never writes it twice.

Each call is a plan of the client core (`flotilla._core`, shared with the asyncio client); this
module only runs the plans' gRPC calls and sleeps on the calling thread, and a subscription's
stream (with a watchdog thread for a stalled one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import grpc

from flotilla._checks import (
    SUBSCRIBE_IDLE_TIMEOUT_S,
    check_poll_timeout,
    check_stop_after_idle,
)
from flotilla._client_setup import ClientSetup
from flotilla._core import CHANNEL_OPTIONS, ClientCore, Failed, Plan, Rpc
from flotilla._group_client import GroupAdmin
from flotilla._plans import POLL_STEP_S, keepalive_ms, unreachable_reason
from flotilla._security_client import SecurityAdmin
from flotilla.errors import from_rpc_error
from flotilla.producer import Producer
from flotilla.types import Headers, Member, Record, RecordMetadata, TopicInfo
from proto import flotilla_pb2 as pb
from proto import flotilla_pb2_grpc

__all__ = [
    "POLL_STEP_S",
    "Client",
    "check_poll_timeout",
    "check_stop_after_idle",
    "keepalive_ms",
]

T = TypeVar("T")


class Client(ClientSetup[grpc.Channel], GroupAdmin, SecurityAdmin):
    """A connection to a Flotilla cluster: topics, produce, read, poll and subscribe, and
    consumer groups (`consumer`, `list_groups`, `describe_group`, `reset_group_offsets`,
    `delete_group`).

    `bootstrap`: one or more `host:port` of any nodes; the client learns the rest. `timeout_s`:
    how long a call retries (failover, no leader yet) before it raises. `acks`: "all" (a
    produce is acknowledged once a quorum has it durably) or "leader" (once the leader appended
    it: faster, may be lost on failover). Thread-safe; close it (or use `with`) when done.

    Security (each falls back to its environment variable when not given): `tls_ca`
    ($FLOTILLA_TLS_CA), the cluster CA's certificate file, turns TLS on; `tls_cert` and
    `tls_key` ($FLOTILLA_TLS_CERT, $FLOTILLA_TLS_KEY), this client's certificate and key for
    mutual TLS; `token` ($FLOTILLA_TOKEN), a bearer token from `flotilla token add`, sent with
    every call (over plaintext only to loopback addresses); `tls_server_name`, the name the
    nodes' certificates are checked for instead of the host dialled (e.g. "flotilla-node").
    The files are read now: a missing or unreadable one is an InvalidArgument naming it. The
    cluster refusing the caller raises AuthenticationError (unknown) or AuthorizationError
    (not allowed), never retried. See `flotilla._credentials`.
    """

    @classmethod
    def _over(cls, core: ClientCore) -> Client:
        """A sync client over another client's core (its router, producer ids and sequences):
        the asyncio client's batching producer sends through one."""
        client = cls.__new__(cls)
        client._core, client.router = core, core.router
        client.timeout_s, client.acks = core.timeout_s, core.acks
        client._channels, client._stubs = {}, {}
        client._stub_lock = threading.Lock()
        return client

    # -- the driver ------------------------------------------------------------------------------
    def _stub(self, address: str) -> flotilla_pb2_grpc.FlotillaStub:
        stub = self._stubs.get(address)
        if stub is None:
            with self._stub_lock:  # threads share the client: one channel per address
                stub = self._stubs.get(address)
                if stub is None:
                    channel = self._core.credentials.channel(address, CHANNEL_OPTIONS)
                    self._channels[address] = channel
                    stub = self._stubs[address] = flotilla_pb2_grpc.FlotillaStub(channel)
        return stub

    def _run(self, plan: Plan[T]) -> T:
        """Runs a plan of the core: its calls and sleeps on this thread; its value."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Rpc):
                    step = plan.send(self._call(step))
                else:
                    time.sleep(step.seconds)
                    step = plan.send(None)
        except StopIteration as done:
            return done.value

    def _call(self, rpc: Rpc) -> Any:
        method = getattr(self._stub(rpc.address), rpc.method)
        metadata = self._core.credentials.metadata
        try:
            if rpc.on_issued is None or rpc.on_issued.done:
                return method(rpc.request, timeout=rpc.timeout_s, metadata=metadata)
            call = method.future(rpc.request, timeout=rpc.timeout_s, metadata=metadata)
            rpc.on_issued()
            return call.result()
        except grpc.RpcError as error:
            return Failed(from_rpc_error(error), unreachable_reason(error))

    # -- topics ----------------------------------------------------------------------------------
    def refresh(self, topics: Sequence[str] = ()) -> None:
        """Reloads cluster metadata (members, topics, leaders)."""
        self._run(self._core.refresh(topics))

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 0,
        *,
        retention_bytes: int = 0,
        retention_ms: int = 0,
        max_delay_ms: int | None = None,
    ) -> TopicInfo:
        """Creates a topic; idempotent when a topic of the same spec exists. A
        `replication_factor` of 0 takes the cluster's default (3, or the live members if fewer;
        `TopicInfo.note` then says so). `max_delay_ms`: the longest delay a delayed produce
        may ask (None: the default, 40 days; else 1000 to 365 days in ms)."""
        return self._run(
            self._core.create_topic(
                name, partitions, replication_factor, retention_bytes, retention_ms, max_delay_ms
            )
        )

    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        max_delay_ms: int | None = None,
    ) -> TopicInfo:
        """Changes a topic; None leaves a setting as it is. `partitions`: more than it has,
        never fewer (Kafka's `--alter --partitions`: keyed records written from now on may go
        to another partition than earlier ones of the same key). Retention (0: unlimited) is
        applied by every node at its next retention check (`retention_check_s`).
        `max_delay_ms` (0: the default, 40 days) bounds delayed produces from now on."""
        return self._run(
            self._core.alter_topic(name, partitions, retention_bytes, retention_ms, max_delay_ms)
        )

    def delete_topic(self, name: str) -> None:
        """Deletes a topic and its records on every replica; TopicNotFound if there is none."""
        self._run(self._core.delete_topic(name))

    def list_topics(self) -> list[str]:
        """The names of every topic."""
        return self._run(self._core.list_topics())

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic's settings and its partitions' leaders, replicas and offsets."""
        return self._run(self._core.describe_topic(name))

    def members(self) -> list[Member]:
        """The cluster's members as the node asked sees them (alive, suspect, dead, left)."""
        return self._run(self._core.members())

    def metadata(self) -> pb.MetadataResponse:
        """The raw metadata (members, every topic, learners included) from any node."""
        return self._run(self._core.metadata())

    def _topic(self, name: str) -> TopicInfo:
        """The topic as this client knows it (the cluster is asked only when it knows none);
        TopicNotFound if there is none. The batching producer's look-up."""
        return self._run(self._core.topic(name))

    # -- produce ---------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
    ) -> RecordMetadata[Any]:
        """Writes one record and waits until it is acknowledged (committed on a quorum with
        acks="all"; appended by the leader with acks="leader").

        Delayed delivery: with `delay_ms` (from now) or `deliver_at_ms` (epoch ms), at most one,
        the record is durably accepted now and appended to the partition, with an offset, at
        its time — no reader sees it earlier. It carries the header `flotilla-deliver-at` (the
        due time, ASCII decimal); the answer has `offset` None and `deliver_at_ms`. The topic's
        `max_delay_ms` bounds the delay; a time more than 1 s in the past is refused
        (InvalidArgument naming the bound), one in the past by less is due at once."""
        return self._run(
            self._core.produce(topic, value, key, partition, headers, delay_ms, deliver_at_ms)
        )

    def produce_batch(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[RecordMetadata[int]]:
        """Writes unkeyed records as one batch to one partition (round-robin across calls)."""
        return self._run(self._core.produce_batch(topic, values, partition))

    def send_batch(
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
        A retry resends the very same bytes, so the server never writes the batch twice.
        `on_issued` runs once the first attempt is on its way (the batching producer starts a
        partition's next batch only then, so they reach the leader in order); `abandoned`
        says when an earlier batch of this one's producer id failed for good. A batch the
        leader will never write under its producer id (`ProducerGap`) is resent under a new one;
        `on_moved` then hears its new (producer id, first sequence). `deliver_at_ms` (not 0):
        a delayed batch, due then, encoded under the partition's delayed sequence space (every
        record with the `flotilla-deliver-at` header); its answer is its place in the timer
        log, not an offset."""
        return self._run(
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
    ) -> Producer:
        """A batching producer (`flotilla.producer`): `send` returns a Future; `flush`, `close`.
        At most `buffer_bytes` of records wait to be sent; `send` blocks while it is full."""
        return Producer(
            self,
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            max_in_flight=max_in_flight,
            buffer_bytes=buffer_bytes,
            max_in_flight_per_partition=max_in_flight_per_partition,
        )

    # -- read --------------------------------------------------------------------------------------
    def fetch(
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
        return self._run(
            self._core.fetch(topic, partition, offset, max_records, replica, max_wait_ms)
        )

    def read(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        max_records: int = 1000,
        replica: str | None = None,
    ) -> list[Record]:
        """Committed records from `offset` on (at most `max_records`), from any replica unless
        `replica` pins one. Raises OffsetOutOfRange below the log start or past the end (as
        the leader sees it), OffsetNotAvailable if no replica had the offset in time."""
        return self._run(self._core.read(topic, partition, offset, max_records, replica))

    def poll(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        timeout_s: float = 1.0,
        *,
        max_records: int = 1000,
        replica: str | None = None,
    ) -> list[Record]:
        """Committed records from `offset` on (at most `max_records`), waiting up to about
        `timeout_s` for the first one to be committed: a long poll, as Kafka's `poll(timeout)`.
        [] when none came in time. The caller keeps the position: the next poll starts at
        `records[-1].offset + 1`. OffsetOutOfRange below the log start or past the end."""
        return self._run(self._core.poll(topic, partition, offset, timeout_s, max_records, replica))

    def subscribe(
        self,
        topic: str,
        partition: int = 0,
        offset: int = 0,
        replica: str | None = None,
        *,
        idle_timeout_s: float = SUBSCRIBE_IDLE_TIMEOUT_S,
        stop_after_idle_s: float | None = None,
    ) -> Generator[Record, None, None]:
        """Records from `offset` on, following the tail; survives replica failures. A replica
        that sends nothing, not even a keepalive, for `idle_timeout_s` (paused, wedged) or
        that lags is left for another, from the next offset (nothing lost or repeated).
        `stop_after_idle_s`: the iteration ends once no record came for that long (None:
        it follows for ever); time the caller spends with the records does not count."""
        subscription = self._core.subscription(
            topic, partition, offset, replica, idle_timeout_s, stop_after_idle_s
        )
        self._topic(topic)
        while True:
            address, request = subscription.connect()
            stream = self._stub(address).Subscribe(
                request, metadata=self._core.credentials.metadata
            )
            watchdog = _IdleWatchdog(stream, subscription.idle_s)
            try:
                while True:
                    watchdog.waiting()
                    response = next(stream, None)
                    watchdog.heard()
                    if response is None:
                        break  # the node ended the stream (it stops): resume elsewhere
                    yield from subscription.records(response)
                    if subscription.delivered(response):
                        return
            except grpc.RpcError as error:
                if not watchdog.fired:
                    if subscription.failed(from_rpc_error(error)):
                        self._run(self._core.refresh_quietly(topic))
                    time.sleep(0.1)
            finally:
                watchdog.stop()
                stream.cancel()
            if subscription.left(address):
                return

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Closes the client's connections; a call made afterwards opens them again."""
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> Client:
        """`with Client(...) as client:` closes the client on the way out."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the client."""
        self.close()


class _IdleWatchdog:
    """Cancels a subscription's stream when it has waited `idle_s` for a message (the node sends
    a keepalive every SUBSCRIBE_KEEPALIVE_MS it has nothing new). Only time spent waiting on the
    stream counts, not time the caller spends with the records. One thread per stream."""

    def __init__(self, stream: grpc.Future, idle_s: float) -> None:
        self.stream = stream
        self.idle_s = idle_s
        self.fired = False
        self._deadline: float | None = None
        self._stopped = False
        self._condition = threading.Condition()
        threading.Thread(target=self._watch, name="flotilla-subscribe-idle", daemon=True).start()

    def waiting(self) -> None:
        with self._condition:
            self._deadline = time.monotonic() + self.idle_s
            self._condition.notify()

    def heard(self) -> None:
        with self._condition:
            self._deadline = None

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify()

    def _watch(self) -> None:
        with self._condition:
            while not self._stopped:
                if self._deadline is None:
                    self._condition.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    self.fired = True
                    self.stream.cancel()
                    return
                self._condition.wait(remaining)
