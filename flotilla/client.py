"""The synchronous client (thread-safe).

    from flotilla import Client
    with Client("127.0.0.1:7001") as c:
        c.create_topic("orders", partitions=3, replication_factor=3)
        meta = c.produce("orders", b"hello", key=b"customer-7")
        records = c.read("orders", partition=meta.partition, offset=meta.offset)

Routing: metadata from any node, a leader cache, `NOT_LEADER` hints followed, retries with
backoff until `timeout_s`. Every batch carries this client's producer id and a per-partition
sequence number, and a retry resends the very same bytes, so the server never writes it twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, TypeVar

import grpc

from flotilla._routing import (
    METADATA_GRACE_S,
    RETRIABLE,
    RYW_WAIT_S,
    SUBSCRIBE_IDLE_TIMEOUT_S,
    SUBSCRIBE_KEEPALIVE_MS,
    Headers,
    Member,
    Once,
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

if TYPE_CHECKING:
    from flotilla.producer import Producer

__all__ = ["Client", "check_poll_timeout", "check_stop_after_idle", "keepalive_ms"]

T = TypeVar("T")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.http2.lookahead_bytes", 16 * 1024 * 1024),  # large fetches arrive without stalls
]


# A poll's long wait is cut in steps of at most this: a follower at the tail that waited and still
# has nothing is asked no further (the leader is), so one step may cost a wait per replica.
POLL_STEP_S = 0.25


def check_stop_after_idle(stop_after_idle_s: object) -> float | None:
    """InvalidArgument naming a bad `stop_after_idle_s` (None, or seconds > 0)."""
    if stop_after_idle_s is None:
        return None
    if (
        not isinstance(stop_after_idle_s, int | float)
        or isinstance(stop_after_idle_s, bool)
        or not stop_after_idle_s > 0
    ):
        raise InvalidArgument(
            f"stop_after_idle_s={stop_after_idle_s!r} is invalid: use None (follow for ever) or "
            "a number of seconds > 0"
        )
    return float(stop_after_idle_s)


def check_poll_timeout(timeout_s: object) -> float:
    """InvalidArgument naming a bad poll `timeout_s` (seconds, 0 to 60)."""
    if (
        not isinstance(timeout_s, int | float)
        or isinstance(timeout_s, bool)
        or not 0 <= timeout_s <= 60
    ):
        raise InvalidArgument(
            f"timeout_s={timeout_s!r} is invalid: use a number of seconds from 0 (answer at once) "
            "to 60"
        )
    return float(timeout_s)


def keepalive_ms(stop_after_idle_s: float | None) -> int:
    """A subscription's keepalive interval: the default, or shorter when the subscription is to
    end after `stop_after_idle_s` without a record (a keepalive is when it notices)."""
    if stop_after_idle_s is None:
        return SUBSCRIBE_KEEPALIVE_MS
    return max(50, min(SUBSCRIBE_KEEPALIVE_MS, int(stop_after_idle_s * 500)))


class Client:
    """A connection to a Flotilla cluster: topics, produce, read, poll and subscribe.

    `bootstrap`: one or more `host:port` of any nodes; the client learns the rest. `timeout_s`:
    how long a call retries (failover, no leader yet) before it raises. `acks`: "all" (a
    produce is acknowledged once a quorum has it durably) or "leader" (once the leader appended
    it: faster, may be lost on failover). Thread-safe; close it (or use `with`) when done.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = 15.0,
        acks: str = "all",
    ) -> None:
        if acks not in ("all", "leader"):
            raise InvalidArgument(f"acks={acks!r}: use 'all' (durable on a quorum) or 'leader'")
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.router = Router(addresses)
        self.timeout_s = timeout_s
        self.acks = pb.ACKS_ALL if acks == "all" else pb.ACKS_LEADER
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, flotilla_pb2_grpc.FlotillaStub] = {}  # one per channel: cheap calls
        self._stub_lock = threading.Lock()

    # -- plumbing --------------------------------------------------------------------------------
    def _stub(self, address: str) -> flotilla_pb2_grpc.FlotillaStub:
        stub = self._stubs.get(address)
        if stub is None:
            with self._stub_lock:  # threads share the client: one channel per address
                stub = self._stubs.get(address)
                if stub is None:
                    channel = grpc.insecure_channel(address, options=_OPTIONS)
                    self._channels[address] = channel
                    stub = self._stubs[address] = flotilla_pb2_grpc.FlotillaStub(channel)
        return stub

    def _any_node(self, call: Callable[[flotilla_pb2_grpc.FlotillaStub], T]) -> T:
        """Runs `call` on the first node that answers; errors other than unavailability raise."""
        deadline = time.monotonic() + self.timeout_s
        last: FlotillaError | None = None
        nobody = self.router.watch_unreachable()
        while time.monotonic() < deadline:
            addresses = self.router.candidates()
            for address in addresses:
                try:
                    return call(self._stub(address))
                except grpc.RpcError as error:
                    last = from_rpc_error(error)
                    if not isinstance(last, Unavailable | Timeout):
                        raise last from None
                    nobody.failed(address, error)
            given_up = nobody.round_done(addresses, time.monotonic())
            if given_up is not None:
                raise given_up
            time.sleep(0.1)
        raise last or Unavailable("no node answered")

    def refresh(self, topics: Sequence[str] = ()) -> None:
        """Reloads cluster metadata (members, topics, leaders)."""
        response = self._any_node(
            lambda stub: stub.Metadata(pb.MetadataRequest(topics=topics), timeout=5)
        )
        self.router.absorb(response)

    def _not_found_grace(self, call: Callable[[], T]) -> T:
        """Retries `call` on TopicNotFound for `METADATA_GRACE_S`: a topic just created may not
        have reached every node's metadata yet (as with Kafka's UNKNOWN_TOPIC_OR_PARTITION)."""
        deadline = time.monotonic() + METADATA_GRACE_S
        while True:
            try:
                return call()
            except TopicNotFound:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _topic(self, name: str) -> TopicInfo:
        info = self.router.topic(name)
        if info is None:
            self._not_found_grace(lambda: self.refresh([name]))
            info = self.router.topic(name)
        if info is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return info

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(
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
        info = topic_info(self._any_node(lambda stub: stub.CreateTopic(request, timeout=20)))
        self._not_found_grace(lambda: self.refresh([name]))
        return info

    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
    ) -> TopicInfo:
        """Changes a topic; None leaves a setting as it is. `partitions`: more than it has,
        never fewer (Kafka's `--alter --partitions`: keyed records written from now on may go
        to another partition than earlier ones of the same key). Retention (0: unlimited) is
        applied by every node at its next retention check (`retention_check_s`)."""
        request = alter_request(name, partitions, retention_bytes, retention_ms)
        response = self._any_node(lambda stub: stub.AlterTopic(request, timeout=20))
        self.router.absorb(pb.MetadataResponse(topics=[response]))  # its partitions from now
        return topic_info(response)

    def delete_topic(self, name: str) -> None:
        """Deletes a topic and its records on every replica; TopicNotFound if there is none."""
        self._any_node(lambda stub: stub.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=20))
        self.router.forget_topic(name)

    def list_topics(self) -> list[str]:
        """The names of every topic."""
        return list(
            self._any_node(lambda stub: stub.ListTopics(pb.ListTopicsRequest(), timeout=5)).names
        )

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic's settings and its partitions' leaders, replicas and offsets."""
        response = self._not_found_grace(
            lambda: self._any_node(
                lambda stub: stub.Metadata(pb.MetadataRequest(topics=[name]), timeout=5)
            )
        )
        self.router.absorb(response)
        return topic_info(response.topics[0])

    def members(self) -> list[Member]:
        """The cluster's members as the node asked sees them (alive, suspect, dead, left)."""
        response = self._any_node(lambda stub: stub.Metadata(pb.MetadataRequest(), timeout=5))
        self.router.absorb(response)
        return [member(m) for m in response.members]

    def metadata(self) -> pb.MetadataResponse:
        """The raw metadata (members, every topic, learners included) from any node."""
        response = self._any_node(lambda stub: stub.Metadata(pb.MetadataRequest(), timeout=5))
        self.router.absorb(response)
        return response

    # -- produce ---------------------------------------------------------------------------------
    def produce(
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
        self._topic(topic)
        chosen = self.router.partition_for(topic, key, partition)
        batch = self.router.encode(topic, chosen, [(key, value, headers, now_ms())])
        base = self.send_batch(topic, chosen, batch)
        return RecordMetadata(topic, chosen, base)

    def produce_batch(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> list[RecordMetadata]:
        """Writes unkeyed records as one batch to one partition (round-robin across calls)."""
        if not values:
            return []
        self._topic(topic)
        chosen = self.router.partition_for(topic, None, partition)
        timestamp = now_ms()
        batch = self.router.encode(
            topic, chosen, [(None, check_value(v), None, timestamp) for v in values]
        )
        base = self.send_batch(topic, chosen, batch)
        return [RecordMetadata(topic, chosen, base + n) for n in range(len(values))]

    def send_batch(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        on_issued: Callable[[], None] | None = None,
        abandoned: Callable[[], bool] | None = None,
        on_moved: Callable[[int, int], None] | None = None,
    ) -> int:
        """Sends an encoded batch to the partition's leader until it commits; its base offset.
        A retry resends the very same bytes, so the server never writes the batch twice.
        `on_issued` runs once the first attempt is on its way (the batching producer starts a
        partition's next batch only then, so they reach the leader in order); `abandoned`
        says when an earlier batch of this one's producer id failed for good. A batch the
        leader will never write under its producer id (`ProducerGap`) is resent under a new one;
        `on_moved` then hears its new (producer id, first sequence)."""
        issued = Once(on_issued)
        sequences = self.router.sequences
        route = ProduceRoute(self.router, topic, partition, self.timeout_s, abandoned)
        route.batch = peek_producer(batch)
        try:
            while True:
                try:
                    base = self._send_batch(route, batch, issued)
                    break
                except ProducerGap as gap:  # resend under a new id (see `Sequences.move`)
                    moved = sequences.move(topic, partition, *route.batch)
                    if moved is None:
                        raise Unavailable(
                            f"{gap.cause} (an earlier batch of this producer failed for good; "
                            "this one was not written: send it again)"
                        ) from None
                    batch, route.batch = with_producer(batch, *moved), moved
                    if on_moved is not None:
                        on_moved(*moved)
            self.router.note_written(topic, partition, base, batch)
            return base
        except FlotillaError:
            sequences.reset(topic, partition, route.batch[0])
            raise
        finally:
            sequences.settled(topic, partition, *route.batch)
            issued()  # a batch that never went out releases the next one too

    def _send_batch(self, route: ProduceRoute, batch: bytes, issued: Once) -> int:
        topic, partition = route.topic, route.partition
        while True:
            attempt_s = route.attempt_s()
            address = route.next_address()
            if address is None:
                self._refresh_quietly(topic)
                address = route.next_address()
            if address is not None:
                request = pb.ProduceRequest(
                    topic=topic, partition=partition, batch=batch, acks=self.acks,
                    timeout_ms=max(1, int(attempt_s * 1000)),
                )  # fmt: skip
                try:
                    if issued.done:
                        response = self._stub(address).Produce(request, timeout=attempt_s)
                    else:
                        call = self._stub(address).Produce.future(request, timeout=attempt_s)
                        issued()
                        response = call.result()
                    return int(response.base_offset)
                except grpc.RpcError as error:
                    if route.failed(address, from_rpc_error(error)):
                        continue
            time.sleep(route.pause_s())
            if route.refresh_due():  # the cached routes failed twice: ask the cluster afresh
                self._refresh_quietly(topic)

    def _refresh_quietly(self, topic: str) -> None:
        try:
            self.refresh([topic])
        except (Unavailable, Timeout, TopicNotFound):
            pass  # a node whose metadata lags; the cached routes still stand

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
        from flotilla.producer import Producer  # noqa: PLC0415 (cycle: producer uses Client)

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
        check_read(offset, max_records)
        self._topic(topic)
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
                    response = self._stub(address).Fetch(
                        request, timeout=5 + max_wait_ms / 1000 + RYW_WAIT_S
                    )
                except grpc.RpcError as error:
                    last = from_rpc_error(error)
                    if not worth_retrying(last, grace_until):
                        raise last from None
                    continue
                if behind.accept(response):
                    return response
            if behind.best is not None:
                return behind.best
            time.sleep(0.05)
            self._refresh_quietly(topic)
        raise last or Unavailable(f"no replica of {topic}/{partition} answered")

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
        response = self.fetch(topic, partition, offset, max_records, replica)
        return decode_fetch(response, offset, max_records)

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
        wait_s = check_poll_timeout(timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            step_s = min(POLL_STEP_S, max(0.0, deadline - time.monotonic()))
            response = self.fetch(
                topic, partition, offset, max_records, replica, max_wait_ms=int(step_s * 1000)
            )
            records = decode_fetch(response, offset, max_records)
            if records or time.monotonic() >= deadline:
                return records

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
        check_read(offset)
        idle_s = check_idle_timeout(idle_timeout_s)
        stop_s = check_stop_after_idle(stop_after_idle_s)
        self._topic(topic)
        avoid: set[str] = set()
        quiet_since = time.monotonic()
        while True:
            address = subscribe_address(
                self.router.read_addresses(topic, partition, replica), avoid
            )
            stream = self._stub(address).Subscribe(
                pb.FetchRequest(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    max_wait_ms=keepalive_ms(stop_s),
                )
            )
            watchdog = _IdleWatchdog(stream, idle_s)
            try:
                while True:
                    watchdog.waiting()
                    response = next(stream, None)
                    watchdog.heard()
                    if response is None:
                        break  # the node ended the stream (it stops): resume elsewhere
                    for record in decode_fetch(response, offset, 1 << 62):
                        offset = record.offset + 1
                        yield record
                    if response.batches:
                        avoid.clear()
                        quiet_since = time.monotonic()
                    elif stop_s is not None and time.monotonic() - quiet_since >= stop_s:
                        return
            except grpc.RpcError as error:
                if not watchdog.fired:
                    failure = from_rpc_error(error)
                    if not isinstance(failure, RETRIABLE):
                        raise failure from None
                    time.sleep(0.1)
            finally:
                watchdog.stop()
                stream.cancel()
            if stop_s is not None and time.monotonic() - quiet_since >= stop_s:
                return
            avoid.add(address)

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
